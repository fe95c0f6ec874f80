"""`trainstack doctor` against `trainstack local serve`, as a user runs it: every check passes on a fresh
twin, and each fails, with its fix, once the one thing it reads is changed the way a user can change it:
the credentials, the outputs file, an AWS API call against the served endpoint (which the printed fix,
run as printed, undoes where it is a command), a `local serve` flag, or `trainstack local fault` making
a call answer AccessDenied, as IAM answers a caller without the permission."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.cli.served import Served, serving
from trainstack import images
from trainstack_cli.doctor import CHECKS, CREDENTIALS, FAILED, NOT_APPLICABLE, OUTPUTS, PASSED
from trainstack_cli.stack import EXIT_NO_STACK, EXIT_RUN_FAILED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TRIGGER = "trainstack-local-trigger"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/local"
DEFAULT_IMAGE = images.default_base_image("us-east-1")
ALL_CHECKS = [CREDENTIALS, OUTPUTS, *(check.name for check in CHECKS)]
BUCKET_CHECK, QUOTAS, ZONE, BATCH_ROLE, TRACKING, FUNCTIONS, IMAGE = (check.name for check in CHECKS)


@pytest.fixture(scope="module")
def served(queue_stack, tmp_path_factory):
    """A stack with every part a check reads: the team queue, the tracking server."""
    with serving(queue_stack.json, tmp_path_factory.mktemp("doctor")) as stack:
        yield stack


def doctor(served: Served, *arguments: str, **environment: str) -> tuple[int, list[dict]]:
    result = served.trainstack("doctor", "--json", *arguments, **environment)
    assert not result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def failures(results: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for result in results:
        if result["status"] == FAILED:
            found.setdefault(result["check"], []).append(result)
    return found


def test_every_check_passes_on_a_fresh_local_serve(served):
    code, results = doctor(served)

    assert code == 0
    assert list(dict.fromkeys(r["check"] for r in results)) == ALL_CHECKS
    not_passed = [r for r in results if r["status"] != PASSED]
    # the one example Validate refuses is named, not checked; nothing else is left out
    assert [(r["check"], r["status"]) for r in not_passed] == [(QUOTAS, NOT_APPLICABLE)]
    assert not_passed[0]["detail"].startswith("examples/broken.yaml: not checked: Validate refuses it")
    by_check = {r["check"]: r["detail"] for r in results}
    assert f"encrypted with the stack's key {KEY_ARN}" in by_check[BUCKET_CHECK]
    assert by_check[BATCH_ROLE].endswith(
        ":role/aws-service-role/sagemaker-queuing.batch.amazonaws.com/AWSServiceRoleForAWSBatchWithSagemaker"
    )
    # Created until a tracked job first starts it (another test of this module may have run one)
    assert re.match(r"trainstack-twin: (Created|Started), active", by_check[TRACKING]), by_check[TRACKING]
    assert by_check[FUNCTIONS].startswith("5 functions on python3.13 as deployed, AWS_DATA_PATH=/var/task/aws_models")
    assert by_check[IMAGE].startswith(f"{DEFAULT_IMAGE} (sha256:")
    quotas = [r["detail"] for r in results if r["check"] == QUOTAS and r["status"] == PASSED]
    assert "examples/gpt-small.yaml: 2 x ml.p4d.24xlarge: quota 8, 0 in use" in quotas

    shown = served.trainstack("doctor")  # for people: one line per check, then the count
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert (
        lines[0].startswith(f"✓ {CREDENTIALS}: ")
        and lines[-1] == f"doctor: {len(results) - 1} passed, 0 failed, 1 not applicable"
    )
    # the probe left nothing in the trigger bucket (its version deleted, no delete marker) and started no run
    versions = served.aws_json("s3api", "list-object-versions", "--bucket", TRIGGER, "--prefix", "trainstack-doctor/")
    assert "Versions" not in versions and "DeleteMarkers" not in versions
    machine = served.outputs["StateMachineArn"]
    assert served.aws_json("stepfunctions", "list-executions", "--state-machine-arn", machine)["executions"] == []


def test_credentials_the_endpoint_refuses_fail_the_first_check_and_nothing_else_runs(served):
    code, results = doctor(served, AWS_ACCESS_KEY_ID="AKIAWRONGKEY")

    assert code == EXIT_NO_STACK
    first, *rest = results
    assert (first["check"], first["status"]) == (CREDENTIALS, FAILED)
    assert "AWS refused the credentials (InvalidClientTokenId" in first["detail"]
    assert [(r["check"], r["status"]) for r in rest] == [(name, NOT_APPLICABLE) for name in ALL_CHECKS[1:]]


def test_an_outputs_file_without_a_value_the_cli_needs_fails_the_outputs_check(served, tmp_path):
    outputs = {"trainstack-local": {k: v for k, v in served.outputs.items() if k != "KeyArn"}}
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))

    code, results = doctor(served, "--outputs", str(tmp_path / "outputs.json"))

    assert code == EXIT_NO_STACK
    assert [(r["check"], r["status"]) for r in results[:2]] == [(CREDENTIALS, PASSED), (OUTPUTS, FAILED)]
    assert "stack value KeyArn (KEY_ARN) is missing; deploy it with this version of trainstack" in results[1]["detail"]


def _function_variables(served: Served, name: str) -> dict[str, str]:
    return served.aws_json("lambda", "get-function-configuration", "--function-name", name)["Environment"]["Variables"]


def _configure(name: str, *setting: str) -> list[str]:
    return ["lambda", "update-function-configuration", "--function-name", name, *setting]


def _variables(variables: dict[str, str]) -> str:
    return json.dumps({"Variables": variables})


ENCRYPTION = {
    "Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KEY_ARN}, "BucketKeyEnabled": True}
    ]
}
ROLE = "AWSServiceRoleForAWSBatchWithSagemaker"
STACK_VARIABLES: dict[str, str] = {}  # the Notify function's variables as the stack set them (read by the test)


@dataclass(frozen=True)
class Break:
    """What a user runs with the AWS CLI, the check that then fails, what its line says and its fix, and
    what undoes it (None: the fix itself, run as printed)."""

    run: Callable[[], list[str]]
    check: str
    says: str
    fix: str
    undo: Callable[[], list[str]] | None = None


BREAKS = {
    "bucket encryption removed": Break(
        lambda: ["s3api", "delete-bucket-encryption", "--bucket", TRIGGER],
        BUCKET_CHECK,
        f"was stored with no encryption, not the stack's key {KEY_ARN}",
        "deploy the stack again (cdk deploy)",
        lambda: [
            "s3api",
            "put-bucket-encryption",
            "--bucket",
            TRIGGER,
            "--server-side-encryption-configuration",
            json.dumps(ENCRYPTION),
        ],
    ),
    "Batch's role deleted": Break(
        lambda: ["iam", "delete-service-linked-role", "--role-name", ROLE],
        BATCH_ROLE,
        f"{ROLE} does not exist",
        "aws iam create-service-linked-role --aws-service-name sagemaker-queuing.batch.amazonaws.com",
    ),
    "tracking server stopped": Break(
        lambda: ["sagemaker", "stop-mlflow-tracking-server", "--tracking-server-name", "trainstack-twin"],
        TRACKING,
        "trainstack-twin is Stopped: no job can log to it",
        "aws sagemaker start-mlflow-tracking-server --tracking-server-name trainstack-twin --region us-east-1",
    ),
    "a function's runtime changed": Break(
        lambda: _configure("trainstack-create", "--runtime", "python3.12"),
        FUNCTIONS,
        "trainstack-create runs on python3.12, the stack deploys python3.13",
        "deploy the stack again (cdk deploy)",
        lambda: _configure("trainstack-create", "--runtime", "python3.13"),
    ),
    "a function's AWS_DATA_PATH removed": Break(
        lambda: _configure(
            "trainstack-notify", "--environment", _variables({k: v for k, v in STACK_VARIABLES.items() if k != "AWS_DATA_PATH"})
        ),
        FUNCTIONS,
        "trainstack-notify's AWS_DATA_PATH is unset, not /var/task/aws_models (the asset's API models)",
        "deploy the stack again (cdk deploy)",
        lambda: _configure("trainstack-notify", "--environment", _variables(STACK_VARIABLES)),
    ),
}


@pytest.mark.parametrize("case", list(BREAKS))
def test_a_change_made_with_the_aws_cli_fails_its_one_check_with_the_fix_until_undone(served, case):
    change = BREAKS[case]
    STACK_VARIABLES.update(_function_variables(served, "trainstack-notify"))
    broken = served.aws(*change.run())
    assert broken.returncode == 0, broken.stderr

    code, results = doctor(served)

    assert code == EXIT_RUN_FAILED
    assert [r["check"] for r in results if r["status"] == FAILED] == [change.check]  # that check alone
    (line,) = failures(results)[change.check]
    assert change.says in line["detail"] and line["fix"].startswith(change.fix)
    undone = served.aws(*(change.undo() if change.undo else change.fix.split()[1:]))
    assert undone.returncode == 0, undone.stderr
    assert doctor(served)[0] == 0


@pytest.mark.parametrize(
    ("action", "check", "allow"),
    [("iam:GetRole", BATCH_ROLE, "iam:GetRole"), ("ecr:BatchGetImage", IMAGE, "ecr:BatchGetImage")],
)
def test_a_check_the_caller_may_not_run_fails_naming_the_actions_to_allow(served, action, check, allow):
    refused = served.trainstack("local", "fault", "api", action, "--code", "AccessDeniedException")
    assert refused.returncode == 0, refused.stderr
    try:
        code, results = doctor(served)
    finally:
        assert served.trainstack("local", "fault", "clear").returncode == 0

    assert code == EXIT_RUN_FAILED
    (line,) = [r for r in results if r["status"] == FAILED]
    assert line["check"] == check
    assert line["detail"] == "cannot run: AccessDeniedException: rehearsed fault" and line["fix"] == f"allow the caller {allow}"


@pytest.fixture(scope="module")
def served_elsewhere(default_stack, tmp_path_factory):
    """An account without p4d quota, a training subnet in an AZ without p4d or g5.12xlarge, a region whose
    registry lacks the default framework image: one `local serve` flag each."""
    flags = ("--quota", "ml.p4d.24xlarge=0", "--availability-zone-id", "use1-az3", "--missing-image", DEFAULT_IMAGE)
    with serving(default_stack.json, tmp_path_factory.mktemp("elsewhere"), *flags) as stack:
        yield stack


def test_each_local_serve_flag_fails_the_check_that_reads_it_with_the_fix(served_elsewhere):
    code, results = doctor(served_elsewhere)

    assert code == EXIT_RUN_FAILED
    failed = failures(results)
    assert sorted(failed) == sorted([QUOTAS, ZONE, IMAGE])
    assert [r["detail"].split(":")[0] for r in failed[QUOTAS]] == ["examples/gpt-small.yaml", "examples/llama-13b-smddp.yaml"]
    assert all("quota 'ml.p4d.24xlarge for" in r["detail"] and "is 0 in us-east-1" in r["detail"] for r in failed[QUOTAS])
    assert all(
        r["fix"].startswith("request an increase: aws service-quotas request-service-quota-increase") for r in failed[QUOTAS]
    )
    assert [r["detail"].split(" is not offered")[0] for r in failed[ZONE]] == ["p4d.24xlarge", "g5.12xlarge"]
    assert all("training subnet's AZ (use1-az3)" in r["detail"] and "-c availability_zone_ids=" in r["fix"] for r in failed[ZONE])
    (image,) = failed[IMAGE]
    assert image["detail"] == f"{DEFAULT_IMAGE}: ImageNotFound: Requested image not found"
    assert "pin an older framework_version" in image["fix"]
    by_check = {r["check"]: r["status"] for r in results}
    assert by_check[BATCH_ROLE] == NOT_APPLICABLE  # this stack has no team queue

    # The quota lines come from the quota: the increase each names, run as printed, makes them pass.
    for line in failed[QUOTAS]:
        assert served_elsewhere.aws(*line["fix"].removeprefix("request an increase: aws ").split()).returncode == 0
    assert sorted(failures(doctor(served_elsewhere)[1])) == sorted([ZONE, IMAGE])
