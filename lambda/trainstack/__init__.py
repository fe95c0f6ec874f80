"""trainstack core: the job spec contract and the pure functions around it.

This package is shipped as the Lambda asset and imported by the CLI, the local mode and the CDK
stacks, so every fact about names, images and the job spec lives here exactly once.
"""
