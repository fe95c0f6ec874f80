"""Run with an older botocore (see test_shipped_lambda.py): whether it knows the operations the
handlers call and accepts the requests they send, reading the models on AWS_DATA_PATH if it is set.

stdin: {"CreateTrainingJob": {...}, "SubmitServiceJob": {...}}. stdout: one JSON object.
"""

from __future__ import annotations

import json
import sys

import botocore
import botocore.session
from botocore.serialize import create_serializer
from botocore.validate import ParamValidator

REQUESTS = json.load(sys.stdin)
session = botocore.session.get_session()
models = {"CreateTrainingJob": session.get_service_model("sagemaker"), "SubmitServiceJob": session.get_service_model("batch")}


def problems(operation: str) -> str:
    """What botocore's own check of the request says ("" when it accepts it, and serializes it as the
    client would for the wire)."""
    model = models[operation]
    if operation not in model.operation_names:
        return f"{model.service_name} has no {operation}"
    operation_model = model.operation_model(operation)
    report = ParamValidator().validate(REQUESTS[operation], operation_model.input_shape).generate_report()
    if not report:
        serializer = create_serializer(model.metadata["protocol"], include_validation=False)
        serializer.serialize_to_request(REQUESTS[operation], operation_model)
    return report


loader = session.get_component("data_loader")
print(
    json.dumps(
        {
            "botocore": botocore.__version__,
            "batch_operations": sorted(models["SubmitServiceJob"].operation_names),
            "batch_paginators": sorted(loader.load_service_model("batch", "paginators-1")["pagination"]),
            "problems": {operation: problems(operation) for operation in REQUESTS},
        }
    )
)
