#!/usr/bin/env bash
# The twin's stand-in for the framework images' entry script (aws/deep-learning-containers,
# pytorch/training/docker/build_artifacts/start_with_right_hostname.sh). The real one builds an
# LD_PRELOAD library so that gethostname() returns the SageMaker host name, then runs `train` as
# its child. In the twin the host name is already algo-N (a UTS namespace), so only the shape
# stays: `train` runs as a child of this script, which forwards no signal.
if [[ "$1" = "train" ]]; then
    train
else
    eval "$@"
fi
