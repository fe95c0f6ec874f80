"""Where moto stops short of AWS, the small patches that make it behave as the deployed stack does
(docs/local-aws.md). Pinned moto internals, patched for the
duration of `moto_bridges()` only:

- Lambda: moto without Docker only echoes payloads; here the function's own `Handler` is imported
  and called in-process with the function's environment, and an exception is reported the way
  Lambda reports it, so the state machine's Retry/Catch match the exception class name. The
  handler reads the function's variables, not the process's environment (handlers/environment.py). What the
  handler prints goes to the function's log group, /aws/lambda/<name>, as Lambda sends stdout.
- EventBridge: moto matches rules but cannot deliver to Step Functions or (here) Lambda; a matched
  rule starts the execution with the event as input, or invokes the function asynchronously. A
  StartExecution that fails puts the event into the target's dead-letter queue at once, with
  EventBridge's message attributes (its 24 hours of retries are not emulated).
- Step Functions: a stopped execution is ABORTED from StopExecution on, dated by it, as Step Functions
  answers (moto's interpreter took the stop only when the state it was in returned, ended a stopped Map
  state as FAILED, and failed a stop that came before its thread had begun); a stop of an execution that
  has ended changes nothing and sends no event. An execution that ends
  emits the "Step Functions Execution Status Change" event (StopExecution: ABORTED; the interpreter's
  end: SUCCEEDED, FAILED, TIMED_OUT) that the stack's rule sends to the Stop function.
- Faults: `ApiFaults.inject(service, action, code)` makes the next calls of one API action fail as
  AWS reports that error (throttling, a 5xx, access denied, an SNS refusal), a number of times, for
  a while or intermittently (`fail` of every `every` calls), with the HTTP status AWS gives it, for
  the failure scenarios.
- SageMaker: CreateTrainingJob refuses a duplicate name, an image missing from the region and a
  job past the account's quota (ResourceLimitExceeded, worded as SageMaker words it), as the real API
  does, keeps the request's Environment and MlflowConfig (moto drops both; Describe
  returns them, and the MlflowDetails the twin finds once the job ends) and MetricDefinitions (moto
  replaces them with a sample's) and hands the job to the
  twin; StopTrainingJob (moto has none) asks the twin to stop it; CreatePresignedMlflowTrackingServerUrl
  (moto has none) answers the twin's MLflow server's URL for its name, ResourceNotFound otherwise;
  Describe-, Stop- and StartMlflowTrackingServer answer for that server too (tracking_api.py).
- ECR: BatchGetImage answers from the twin's image registry (registry.py): AWS's framework images
  where the facts file says they exist, the stack's project image (moto's ECR holds neither).
- IAM: CreateServiceLinkedRole of Batch's service for SageMaker names its role as AWS does
  (AWSServiceRoleForAWSBatchWithSagemaker; moto derives another name), which the Batch twin creates
  with the first service environment.
- Service Quotas: moto lists only VPC's; SageMaker's are the twin account's (account_twin.py):
  ListServiceQuotas, GetServiceQuota, and RequestServiceQuotaIncrease, granted at once.
- Batch: moto has no service jobs and cannot create a SAGEMAKER_TRAINING job queue; the service
  environment and service job actions (`/v1/<action>` paths and their BatchResponse methods), and
  CreateJobQueue / DescribeJobQueues for that queue type, go to the Batch twin (batch_twin.py), which
  emits its state change events onto moto's default event bus. Scheduling policies and the other
  queue types stay moto's. The paths are added before the first request reaches `serve`'s app,
  which builds each service's URL map once.
- S3 and IAM (`role_checked_s3`): a request signed with credentials STS issued for a role (a training
  job's, as SageMaker and its containers use them) is decided by the role's policies (iam_twin.py) and
  refused as S3 refuses it (AccessDenied; SignatureDoesNotMatch for a wrong secret); moto checks IAM
  only with its whole access control on, for every caller. Requests with the twin's own keys are the
  platform's and go on unchecked.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.exceptions import ClientError

from trainstack.account import SERVICE_CODE, SPOT, TRAINING, quota_name
from trainstack.polling import poll_until
from trainstack.service_jobs import SERVICE_LINKED_ROLE, SERVICE_LINKED_ROLE_SERVICE
from trainstack_local import iam_twin
from trainstack_local.account_twin import TwinAccount
from trainstack_local.batch_twin import OPERATIONS, SERVICE_JOB_TYPE, BatchClientError, BatchTwin
from trainstack_local.registry import ImageNotFoundError, RepositoryNotFoundError
from trainstack_local.sagemaker_twin import SageMakerTwin, TwinClosedError
from trainstack_local.tracking_api import TrackingServerApi, TrackingServerNotFoundError

# The access key of a SigV4 request, from its Authorization header or a presigned URL's X-Amz-Credential.
_SIGNED_BY = re.compile(r"Credential=([^/,\s]+)/")

# One handler at a time: redirect_stdout is process-wide, so each function's log holds only its own
# output, and each call starts from fresh clients and a fresh read of its environment.
_INVOKE_LOCK = threading.Lock()
# How long closing the bridges waits for the functions EventBridge is still invoking: a Stop takes
# well under a second here, a few seconds more while a fault makes it ask AWS again.
ASYNC_INVOCATIONS_DRAIN_SECONDS = 60


# The HTTP status AWS answers each of its common errors with (the AWS API references' "Common Errors"):
# botocore, and so a caller's retry, reads the status as much as the code. Others: moto's choice.
COMMON_ERROR_STATUS = {
    "InternalFailure": 500,
    "InternalServerError": 500,
    "ServiceUnavailable": 503,
    "ServiceUnavailableException": 503,
    "RequestTimeout": 408,
    "RequestTimeoutException": 408,
    "ThrottlingException": 400,
    "Throttling": 400,
    "TooManyRequestsException": 429,
}


@dataclass
class _Fault:
    code: str
    message: str
    times: int  # answers left (-1: no limit)
    until: float | None  # time.monotonic() past which it is gone (None: no limit)
    answered: int = 0
    fail: int = 1  # of every `every` calls of the action, the first `fail` fail, the others are answered
    every: int = 1
    calls: int = 0  # calls of the action seen meanwhile

    def fails_now(self) -> bool:
        """Whether this call fails, by its place in the cycle of `every` calls."""
        failing = self.calls % self.every < self.fail
        self.calls += 1
        return failing


class ApiFaults:
    """Errors to answer instead of moto's result, per (service, action): a number of times (-1: always),
    for a while (`seconds`), or both, whichever ends first; intermittently with `fail` and `every`
    (of every `every` calls of the action, the first `fail` fail: 1 of 3 is every third call failing,
    3 of 4 outlasts botocore's three attempts of one call). Actions are named as the API names them
    (DescribeServiceJob); moto knows some by their REST path's spelling (describeservicejob)."""

    def __init__(self) -> None:
        self._faults: dict[tuple[str, str], _Fault] = {}
        self._answered: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def inject(
        self,
        service: str,
        action: str,
        code: str,
        message: str = "injected fault",
        times: int = -1,
        seconds: float | None = None,
        *,
        fail: int = 1,
        every: int = 1,
    ) -> None:
        if not 1 <= fail <= every:
            raise ValueError(f"fail {fail} of every {every} calls: fail must be from 1 to every")
        until = None if seconds is None else time.monotonic() + seconds
        with self._lock:
            self._faults[(service, action.lower())] = _Fault(code, message, times, until, fail=fail, every=every)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def answered(self, service: str, action: str) -> int:
        """How many calls of the action the faults have answered so far."""
        with self._lock:
            return self._answered.get((service, action.lower()), 0)

    def take(self, service: str, action: str) -> tuple[str, str] | None:
        action = action.lower()
        with self._lock:
            fault = self._faults.get((service, action))
            if fault is None:
                return None
            if fault.until is not None and time.monotonic() > fault.until:
                del self._faults[(service, action)]
                return None
            if not fault.fails_now():
                return None
            if fault.times == 1:
                del self._faults[(service, action)]
            elif fault.times > 1:
                fault.times -= 1
            self._answered[(service, action)] = self._answered.get((service, action), 0) + 1
            return fault.code, fault.message


def _service_error(code: str, message: str) -> Exception:
    """An AWS error as moto serializes its own, in the protocol of the service that raised it (an
    injected fault, or what the twin refuses that moto does not). The class lives outside moto's
    packages, so moto reads its shape from that service's model only."""
    from moto.core.exceptions import ServiceException

    fault = type("InjectedFault", (ServiceException,), {"__module__": __name__})
    return fault(code, message)


@contextmanager
def moto_bridges(
    twin: SageMakerTwin, region: str, account: str, faults: ApiFaults, batch: BatchTwin, quotas: TwinAccount
) -> Iterator[None]:
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.batch import urls as batch_urls
    from moto.batch.exceptions import ClientException
    from moto.batch.models import batch_backends
    from moto.batch.responses import BatchResponse
    from moto.core.responses import ActionResult, BaseResponse, EmptyResult
    from moto.ecr.responses import ECRResponse
    from moto.events.models import Rule, events_backends
    from moto.iam.models import IAMBackend
    from moto.sagemaker.exceptions import ResourceNotFound, ValidationError
    from moto.sagemaker.responses import SageMakerResponse
    from moto.servicequotas.responses import ServiceQuotasResponse
    from moto.stepfunctions.models import StepFunctionBackend
    from moto.stepfunctions.parser.api import ExecutionStatus
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    originals = {
        (LambdaSimpleBackend, "invoke"): LambdaSimpleBackend.invoke,
        (Rule, "send_to_targets"): Rule.send_to_targets,
        (SageMakerResponse, "create_training_job"): SageMakerResponse.create_training_job,
        (StepFunctionBackend, "stop_execution"): StepFunctionBackend.stop_execution,
        (StepFunctionsParserBackend, "start_execution"): StepFunctionsParserBackend.start_execution,
        (BaseExecutionWorkerCommunication, "terminated"): BaseExecutionWorkerCommunication.terminated,
        (BaseResponse, "call_action"): BaseResponse.call_action,
        (BatchResponse, "createjobqueue"): BatchResponse.createjobqueue,
        (BatchResponse, "describejobqueues"): BatchResponse.describejobqueues,
        (ServiceQuotasResponse, "get_service_quota"): ServiceQuotasResponse.get_service_quota,
        (ECRResponse, "batch_get_image"): ECRResponse.batch_get_image,
        (IAMBackend, "create_service_linked_role"): IAMBackend.create_service_linked_role,
    }
    create_service_linked_role = IAMBackend.create_service_linked_role
    tracking = TrackingServerApi(twin)
    get_service_quota = ServiceQuotasResponse.get_service_quota
    create_job_queue = BatchResponse.createjobqueue
    describe_job_queues = BatchResponse.describejobqueues
    call_action = BaseResponse.call_action
    terminated = BaseExecutionWorkerCommunication.terminated
    create_training_job = SageMakerResponse.create_training_job
    stop_execution = StepFunctionBackend.stop_execution
    start_execution = StepFunctionsParserBackend.start_execution

    def invoke(self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        function = self.get_function(function_name, qualifier)
        module_name, _, attribute = function.handler.rpartition(".")
        handler = getattr(__import__(module_name, fromlist=[attribute]), attribute)
        printed = io.StringIO()
        with _INVOKE_LOCK, _function_environment(function, region), contextlib.redirect_stdout(printed):
            try:
                return json.dumps(handler(json.loads(body or "{}"), None), default=str).encode()
            except Exception as error:  # reported as Lambda reports an unhandled exception
                response_headers["x-amz-function-error"] = "Unhandled"
                trace = traceback.format_exc().splitlines()
                return json.dumps({"errorMessage": str(error), "errorType": type(error).__name__, "stackTrace": trace}).encode()
            finally:
                _function_log(function.function_name, printed.getvalue(), region)

    def send_to_targets(self: Any, original_event: dict[str, Any], transform_input: bool = True) -> None:
        if not self.event_pattern.matches_event(original_event):
            return
        payload = json.dumps(original_event, default=str)
        for target in self.targets:
            if ":states:" in target["Arn"]:
                name = f"s3-{int(time.time() * 1000)}-{abs(hash(payload)) % 10**8}"
                try:
                    boto3.client("stepfunctions", region_name=region).start_execution(
                        stateMachineArn=target["Arn"], name=name, input=payload
                    )
                except ClientError as error:  # past EventBridge's retries (not emulated): the target's DLQ
                    dead_letter(self.arn, target, payload, error)
            elif ":lambda:" in target["Arn"]:  # EventBridge invokes functions asynchronously
                invocation = threading.Thread(
                    target=lambda arn=target["Arn"]: boto3.client("lambda", region_name=region).invoke(
                        FunctionName=arn, Payload=payload.encode()
                    ),
                    daemon=True,
                )
                with invocations_lock:  # events arrive on many threads (executions, jobs, the queue)
                    invocations[:] = [*(running for running in invocations if running.is_alive()), invocation]
                invocation.start()

    # EventBridge's asynchronous invocations, which closing waits for: one that outlived moto's mock would
    # make its calls to AWS itself.
    invocations: list[threading.Thread] = []
    invocations_lock = threading.Lock()

    def dead_letter(rule_arn: str, target: dict[str, Any], payload: str, error: ClientError) -> None:
        """Where EventBridge puts an event it could not deliver: the target's DLQ, with the attributes
        EventBridge sets (the event itself as the body, so it can be redriven as it was)."""
        queue_arn = target.get("DeadLetterConfig", {}).get("Arn")
        if not queue_arn:
            return  # EventBridge drops it
        sqs = boto3.client("sqs", region_name=region)
        attributes = {
            "RULE_ARN": rule_arn,
            "TARGET_ARN": target["Arn"],
            "ERROR_CODE": error.response["Error"]["Code"],
            "ERROR_MESSAGE": error.response["Error"].get("Message", ""),
        }
        sqs.send_message(
            QueueUrl=sqs.get_queue_url(QueueName=queue_arn.rsplit(":", 1)[1])["QueueUrl"],
            MessageBody=payload,
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
        )

    def create(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        if name in self.sagemaker_backend.training_jobs:  # the real API refuses a second job with a name
            raise ValidationError(
                "Training job names must be unique within an AWS account and region, "
                f"and a training job with this name already exists ({name})"
            )
        try:
            image = twin.check_image(self._get_param("AlgorithmSpecification")["TrainingImage"])
        except ImageNotFoundError as error:
            raise ValidationError(str(error)) from None
        refusal = _quota_refusal(
            quotas, twin, self._get_param("ResourceConfig"), bool(self._get_param("EnableManagedSpotTraining"))
        )
        if refusal:
            raise _service_error("ResourceLimitExceeded", refusal)
        specification = copy.deepcopy(self._get_param("AlgorithmSpecification"))  # moto rewrites it in place
        result = create_training_job(self)
        job = self.sagemaker_backend.training_jobs[name]
        job.environment = self._get_param("Environment")
        job.mlflow_config = self._get_param("MlflowConfig")  # moto's Describe returns each attribute, CamelCased
        job.algorithm_specification = specification  # moto swaps in a sample's MetricDefinitions
        job.retry_strategy = self._get_param("RetryStrategy")
        try:
            twin.start(job, image)
        except TwinClosedError as closed:  # the emulated account is going: no job, as a failed create leaves none
            del self.sagemaker_backend.training_jobs[name]
            raise ValidationError(str(closed)) from None  # not worth a retry: the run that asked ends
        return result

    def presigned_tracking_server_url(self: Any) -> Any:
        """The twin's MLflow tracking server answers for its name, as SageMaker signs a user into its
        server's UI; any other name is unknown, as SageMaker answers it (moto has no MLflow API)."""
        name, server = self._get_param("TrackingServerName"), twin.tracking_server
        if server is None or name != server.arn.rsplit("/", 1)[1]:
            raise ResourceNotFound(f"Tracking server {name} does not exist")
        return ActionResult({"AuthorizedUrl": server.url})

    def tracking_server_action(method: Callable[[str], dict[str, Any]]) -> Callable[[Any], Any]:
        """A SageMaker action on the twin's tracking server, by its TrackingServerName."""

        def respond(self: Any) -> Any:
            try:
                return ActionResult(method(self._get_param("TrackingServerName")))
            except TrackingServerNotFoundError as error:
                raise ResourceNotFound(str(error)) from None

        return respond

    def batch_get_image(self: Any) -> Any:
        """Every registry's images are the twin's (AWS's framework images, the project image)."""
        registry, repository = self._get_param("registryId") or account, self._get_param("repositoryName")
        try:
            return ActionResult(twin.images.batch_get_image(registry, repository, self._get_param("imageIds"), region))
        except RepositoryNotFoundError as error:
            raise _service_error("RepositoryNotFoundException", str(error)) from None

    def batch_service_linked_role(self: Any, service_name: str, description: str, suffix: str) -> Any:
        if service_name != SERVICE_LINKED_ROLE_SERVICE:
            return create_service_linked_role(self, service_name, description, suffix)
        trust = {
            "Version": "2012-10-17",
            "Statement": [{"Action": ["sts:AssumeRole"], "Effect": "Allow", "Principal": {"Service": [service_name]}}],
        }
        path = f"/aws-service-role/{service_name}/"
        return self.create_role(
            SERVICE_LINKED_ROLE, json.dumps(trust), path, None, description, [], "3600", linked_service=service_name
        )

    def presigned_mlflow_app_url(self: Any) -> Any:
        raise ResourceNotFound(f"MLflow App {self._get_param('Arn')} does not exist")  # the twin runs a tracking server

    def list_service_quotas(self: Any) -> str:
        """SageMaker's quotas are the twin account's; other services' are not emulated."""
        params = json.loads(self.body or "{}")
        if params.get("ServiceCode") != SERVICE_CODE:
            raise _service_error("NoSuchResourceException", f"The twin emulates the quotas of {SERVICE_CODE} only.")
        listed = quotas.quotas()
        start = int(params.get("NextToken") or 0)
        size = int(params.get("MaxResults") or 100)
        answer: dict[str, Any] = {"Quotas": listed[start : start + size]}
        if start + size < len(listed):
            answer["NextToken"] = str(start + size)
        return json.dumps(answer)

    def get_quota(self: Any) -> str:
        params = json.loads(self.body or "{}")
        if params.get("ServiceCode") != SERVICE_CODE:
            return get_service_quota(self)
        quota = quotas.by_code(params.get("QuotaCode", ""))
        if quota is None:
            raise _service_error("NoSuchResourceException", f"The quota {params.get('QuotaCode')} does not exist.")
        return json.dumps({"Quota": quota})

    def request_increase(self: Any) -> str:
        """Granted at once (AWS reviews each request, in minutes to days)."""
        params = json.loads(self.body or "{}")
        quota = (
            quotas.grant(params.get("QuotaCode", ""), float(params.get("DesiredValue", 0)))
            if params.get("ServiceCode") == SERVICE_CODE
            else None
        )
        if quota is None:
            raise _service_error("NoSuchResourceException", f"The quota {params.get('QuotaCode')} does not exist.")
        requested = {key: quota[key] for key in ("ServiceCode", "ServiceName", "QuotaCode", "QuotaName", "QuotaArn", "Unit")}
        return json.dumps(
            {
                "RequestedQuota": {
                    **requested,
                    "Id": uuid.uuid4().hex,
                    "DesiredValue": params["DesiredValue"],
                    "Status": "APPROVED",
                }
            }
        )

    def stop_training_job(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        job = self.sagemaker_backend.training_jobs.get(name)
        if job is None:
            raise ValidationError(f"Requested resource not found: training job {name}")
        if job.training_job_status != "InProgress":
            raise ValidationError(f"The request was rejected because the training job is in status {job.training_job_status}.")
        twin.stop(name)
        return EmptyResult()

    announced: set[str] = set()

    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        execution = start_execution(self, *args, **kwargs)
        if twin.feed is not None and execution.execution_arn not in announced:  # not an idempotent repeat
            announced.add(execution.execution_arn)
            twin.feed.run_started(execution.name)
        return execution

    def publish(entry: dict[str, Any]) -> None:
        """One event onto moto's default bus, where the stack's rules match it."""
        events_backends[account][region].put_events([entry])

    def status_changed(execution: Any, status: str) -> None:
        if twin.feed is not None:
            twin.feed.run_ended(execution.name, status, getattr(execution, "cause", None))
        detail = {
            "executionArn": execution.execution_arn,
            "stateMachineArn": execution.state_machine_arn,
            "name": execution.name,
            "status": status,
            "input": execution.execution_input,
        }
        publish({"Source": "aws.states", "DetailType": "Step Functions Execution Status Change", "Detail": json.dumps(detail)})

    stopped_at: dict[str, datetime] = {}  # each stopped execution's stop date

    def stop(self: Any, execution_arn: str) -> Any:
        execution = self.describe_execution(execution_arn)
        if execution.exec_status != ExecutionStatus.RUNNING:
            # An ended (or already stopped) execution's status does not change, so it keeps its status and
            # end date, and EventBridge gets no status-change event: the twin once sent a second one,
            # ABORTED, for a run that had ended FAILED or SUCCEEDED.
            return stop_execution(self, execution_arn)
        # moto's interpreter makes its environment on its own thread, which a stop right after the start
        # can precede (moto then raised AttributeError: a 500): the stop waits for it.
        poll_until(lambda: execution.exec_worker.env, bool, timeout=60, interval=0.01, what="the interpreter's start")
        stopped_at.setdefault(execution_arn, datetime.now(UTC))
        execution = stop_execution(self, execution_arn)
        if execution.exec_status == ExecutionStatus.RUNNING:
            # Step Functions answers ABORTED from the stop on; moto's interpreter takes the stop only once
            # the state it is in (a Lambda task, say) returns, and until then said RUNNING.
            execution.exec_status, execution.stop_date = ExecutionStatus.ABORTED, stopped_at[execution_arn]
        status_changed(execution, "ABORTED")
        return execution

    def execution_ended(self: Any) -> None:
        terminated(self)
        if (stop_date := stopped_at.get(self.execution.exec_arn)) is not None:
            # moto ends a stopped Map state as FAILED, and dates the end when its interpreter got there;
            # AWS says ABORTED, at the stop's date
            self.execution.exec_status, self.execution.stop_date = ExecutionStatus.ABORTED, stop_date
            self.execution.error = self.execution.cause = None  # not the interpreter's own exception
            return  # StopExecution has emitted the status change already
        status_changed(self.execution, self.execution.exec_status.value)

    def batch_action(method: str) -> Callable[[Any], str]:
        """A BatchResponse method that hands the request's JSON body to the Batch twin."""

        def respond(self: Any) -> str:
            return json.dumps(answer(getattr(batch, method), self))

        return respond

    def answer(operation: Callable[[dict[str, Any]], Any], response: Any) -> Any:
        try:
            return operation(json.loads(response.body or "{}"))
        except BatchClientError as error:  # Batch's refusal, as moto serializes its own
            raise ClientException(str(error)) from None

    def create_queue(self: Any) -> str:
        if self._get_param("jobQueueType") != SERVICE_JOB_TYPE:
            return create_job_queue(self)
        return json.dumps(answer(batch.create_job_queue, self))

    def describe_queues(self: Any) -> str:
        """The twin's queues and moto's, as one answer (moto leaves out the names it does not hold)."""
        ours = batch.describe_job_queues({"jobQueues": self._get_param("jobQueues") or []})
        return json.dumps({"jobQueues": ours + json.loads(describe_job_queues(self))["jobQueues"]})

    def fairshare_policy(arn: str) -> dict[str, Any] | None:
        found = batch_backends[account][region].describe_scheduling_policies([arn])
        return found[0].fairshare_policy if found else None

    def faulty_call_action(self: Any) -> Any:
        fault = faults.take(self.service_name, self._get_action())
        if fault is None:
            return call_action(self)
        with warnings.catch_warnings():  # moto notes a common error (a 5xx) missing from the service's model
            warnings.simplefilter("ignore", UserWarning)
            status, headers, body = self.serialized(ActionResult(_service_error(*fault)))  # as moto serializes errors
        headers["status"] = status = COMMON_ERROR_STATUS.get(fault[0], status)
        status, headers, body = self._transform_response(self.response_headers, (body, headers))
        return (status, *self._enrich_response(headers, body))

    LambdaSimpleBackend.invoke = invoke
    BaseResponse.call_action = faulty_call_action
    Rule.send_to_targets = send_to_targets
    SageMakerResponse.create_training_job = create
    SageMakerResponse.stop_training_job = stop_training_job
    ServiceQuotasResponse.list_service_quotas = list_service_quotas
    ServiceQuotasResponse.get_service_quota = get_quota
    ServiceQuotasResponse.request_service_quota_increase = request_increase
    SageMakerResponse.create_presigned_mlflow_tracking_server_url = presigned_tracking_server_url
    SageMakerResponse.create_presigned_mlflow_app_url = presigned_mlflow_app_url
    SageMakerResponse.describe_mlflow_tracking_server = tracking_server_action(tracking.describe)
    SageMakerResponse.stop_mlflow_tracking_server = tracking_server_action(tracking.stop)
    SageMakerResponse.start_mlflow_tracking_server = tracking_server_action(tracking.start)
    ECRResponse.batch_get_image = batch_get_image
    IAMBackend.create_service_linked_role = batch_service_linked_role
    StepFunctionBackend.stop_execution = stop
    StepFunctionsParserBackend.start_execution = start
    BaseExecutionWorkerCommunication.terminated = execution_ended
    BatchResponse.createjobqueue = create_queue
    BatchResponse.describejobqueues = describe_queues
    batch_paths = {f"{{0}}/v1/{action}$": BatchResponse.dispatch for action in OPERATIONS}
    batch_urls.url_paths.update(batch_paths)
    for action, method in OPERATIONS.items():
        setattr(BatchResponse, action, batch_action(method))
    batch.start(publish, fairshare_policy)
    try:
        yield
    finally:
        batch.close()  # local_aws has stopped it already, before the SageMaker twin; this covers other users
        drained_by = time.monotonic() + ASYNC_INVOCATIONS_DRAIN_SECONDS
        while time.monotonic() < drained_by:  # one may set off another (a Stop's own events)
            with invocations_lock:
                running = [invocation for invocation in invocations if invocation.is_alive()]
            if not running:
                break
            running[0].join(timeout=max(0.0, drained_by - time.monotonic()))
        for (owner, attribute), original in originals.items():
            setattr(owner, attribute, original)
        del SageMakerResponse.stop_training_job
        del ServiceQuotasResponse.list_service_quotas
        del ServiceQuotasResponse.request_service_quota_increase
        del SageMakerResponse.create_presigned_mlflow_tracking_server_url
        del SageMakerResponse.create_presigned_mlflow_app_url
        del SageMakerResponse.describe_mlflow_tracking_server
        del SageMakerResponse.stop_mlflow_tracking_server
        del SageMakerResponse.start_mlflow_tracking_server
        for path in batch_paths:
            del batch_urls.url_paths[path]
        for action in OPERATIONS:
            delattr(BatchResponse, action)


def _quota_refusal(quotas: TwinAccount, twin: SageMakerTwin, config: dict[str, Any], spot: bool) -> str:
    """SageMaker's ResourceLimitExceeded message where the job would take the account past its quota
    for every type it may run on (each preference of InstancePreferences); "" where one has room."""
    usage = SPOT if spot else TRAINING
    count = int(config.get("InstanceCount") or 1)
    types = [p["InstanceType"] for p in config.get("InstancePreferences") or []] or [config["InstanceType"]]
    refusals = []
    for instance_type in types:
        name = quota_name(instance_type, usage)
        value = quotas.value(name)
        used = twin.instances_in_use(instance_type, spot)
        if value is None or used + count <= value:
            return ""
        refusals.append(
            f"The account-level service limit '{name}' is {value:g} Instances, with current utilization of {used} "
            f"Instances and a request delta of {count} Instances. Please use AWS Service Quotas to request an increase "
            "for this quota. If AWS Service Quotas is not available, contact AWS support to request an increase for this quota."
        )
    return refusals[0]


def _function_log(function_name: str, text: str, region: str) -> None:
    """What a function printed goes to its log group, /aws/lambda/<name>, as Lambda sends it."""
    if not text.strip():
        return
    logs = boto3.client("logs", region_name=region)
    group = f"/aws/lambda/{function_name}"
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    stream = f"{time.strftime('%Y/%m/%d')}/[$LATEST]{uuid.uuid4().hex}"
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now = int(time.time() * 1000)
    events = [{"timestamp": now, "message": line} for line in text.splitlines() if line]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


@contextmanager
def _function_environment(function: Any, region: str) -> Iterator[None]:
    """The function's environment for the call, as Lambda provides it: its configured variables and
    the runtime's own (the region, its name; Lambda reserves those keys), never the process's, which
    every stack and thread of this process shares; and fresh clients."""
    from trainstack.handlers.environment import function_variables, use_client_factory

    runtime = {"AWS_REGION": region, "AWS_DEFAULT_REGION": region, "AWS_LAMBDA_FUNCTION_NAME": function.function_name}
    use_client_factory(None)  # each call makes its clients anew: moto's backends are this process's
    with function_variables({**function.environment_vars, **runtime}):
        yield


@contextmanager
def role_checked_s3(account: str) -> Iterator[None]:
    """S3 answers a request signed with a role's STS credentials only where the role's policies allow it
    (iam_twin.py), checking its signature first as moto's access control does; any other request goes
    on as moto answers it (the twin's own keys: the platform's, unchecked)."""
    from moto.iam.access_control import S3IAMRequest
    from moto.s3.exceptions import BucketAccessDeniedError, S3AccessDeniedError
    from moto.s3.responses import S3Response

    def checked(self: Any, bucket_name: str | None = None, key_name: str | None = None) -> None:
        signed = self.headers.get("Authorization", "")
        presigned = "Credential=" + (self.querystring.get("X-Amz-Credential") or [""])[0]
        found = _SIGNED_BY.search(signed) or _SIGNED_BY.search(presigned)
        role = iam_twin.assumed_role(account, found.group(1)) if found else None
        if role is None:
            return
        if signed:  # as moto's access control checks it (a presigned URL's query signature goes unchecked)
            query = urlparse(self.uri).query
            path = f"{self.raw_path}?{query}" if query else self.raw_path
            request = S3IAMRequest(account, self.method, path, self.data, self.raw_body, self.headers, self.data["Action"])
            request.check_signature()
        prefix = (self.querystring.get("prefix") or [None])[0]
        action, resource, context = iam_twin.s3_request(self.data["Action"], bucket_name, key_name, prefix)
        if not iam_twin.allows(iam_twin.role_policies(account, role), action, resource, context):
            raise BucketAccessDeniedError(bucket=bucket_name) if bucket_name else S3AccessDeniedError()

    S3Response._authenticate_and_authorize_s3_action = checked
    try:
        yield
    finally:
        del S3Response._authenticate_and_authorize_s3_action  # the inherited one again
