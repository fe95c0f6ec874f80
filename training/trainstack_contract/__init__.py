"""The contract between trainstack's control plane and its built-in training script, in one home.

Torch-free and standard-library only, so every side imports the same code: the Lambda functions
(lambda/trainstack, which ship this package whole in their asset), the training script
(trainstack_training, which ships it in the job's source directory and image beside itself), the
CLI and the local twin. What it holds is what both sides must agree on:

- config: the built-in script's typed config and its hyperparameter table (Validate parses with it);
- health_rules: the health rules table (the spec's `health`, the script's checks);
- model_sizes: the built-in models' sizes (the planner's memory and FLOPs);
- runtime_requirements: what the script needs of an image's software (Validate checks images);
- metric_lines: the log line format the script prints and the regexes SageMaker reads it with;
- job_names: the training job name format and its one parser;
- fault_hooks: the test-only hooks' variables (the twin sets them, Validate refuses them in a spec);
- checkpoint_cadence: the failure rate and the checkpoint interval (`checkpoint_every: auto`, the plan's goodput).
"""
