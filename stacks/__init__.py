"""CDK constructs and the stack that wires them; `build_app` is what `app.py` and the tests call."""
