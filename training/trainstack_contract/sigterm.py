"""What SageMaker gives a job that it stops: one home for the script (whether a save on SIGTERM can
finish), the planner (whether a checkpoint's write time fits) and the twin (when it kills)."""

# StopTrainingJob: "SageMaker sends the algorithm the SIGTERM signal, which delays job termination for
# 120 seconds" (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html), and
# StoppingCondition says the same of MaxRuntimeInSeconds
# (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StoppingCondition.html); a spot
# reclaim stops a job the same way.
SIGTERM_GRACE_SECONDS = 120
