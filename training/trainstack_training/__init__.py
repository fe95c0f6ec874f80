"""The training package our SageMaker jobs run: models apart from parallelism, one strategy
module per kind of parallelism, and small components for data, checkpoints, metrics, faults, the
watchdog and the EFA transport check."""
