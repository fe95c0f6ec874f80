"""The built-in script's test-only fault hooks: the variables that inject a hang, a NaN loss, a
transport error or a frozen layer into a real run (trainstack_training.faults), honoured only where
the local twin says the process runs in it. A spec's `environment` may not set any of them (Validate
refuses the prefix), so on SageMaker they never act."""

PREFIX = "TRAINSTACK_"
TWIN = f"{PREFIX}TWIN"  # "1" in the twin's containers: the only place the hooks act
INJECT_HANG = f"{PREFIX}INJECT_HANG"  # <rank>:<step>
INJECT_NAN = f"{PREFIX}INJECT_NAN"  # <rank>:<step>
INJECT_TRANSPORT_ERROR = f"{PREFIX}INJECT_TRANSPORT_ERROR"  # <rank>:<step>
FREEZE = f"{PREFIX}FREEZE"  # <layer>
