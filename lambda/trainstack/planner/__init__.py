"""The planner: before a cluster is billed, whether a job fits in GPU memory, how fast it runs, the
most it can cost and which change makes it fit. Pure functions over the spec and the facts file;
no torch, no AWS calls. `plan.plan_job` is the entry; preflight.py makes Validate refuse with it."""
