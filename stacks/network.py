"""The EFA-ready training network: one-AZ private subnets, an S3 gateway endpoint, flow logs and
the security group every multi-node job needs (self-referencing ingress *and* egress)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws, Fn, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.compliance import acknowledge, in_every_pack, skip_checkov
from stacks.log_groups import encrypted_log_group
from stacks.roles import ManagedPolicyRole
from trainstack_contract.tracking import is_mlflow_app, resource_name

VPC_CIDR = "10.42.0.0/16"
# A /20 gives 4,091 addresses per AZ: a p5.48xlarge job takes 32 EFA interfaces per node.
TRAINING_SUBNET_MASK = 20
PUBLIC_SUBNET_MASK = 26
HTTPS = 443

# What a presigned upload to an MLflow artifact store does (single and multipart PUTs).
MLFLOW_ARTIFACT_UPLOAD_ACTIONS = ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
# Actions jobs (and SageMaker on their behalf) perform on S3 through the gateway endpoint.
S3_ENDPOINT_ACTIONS = [
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
    "s3:ListBucket",
    "s3:GetBucketLocation",
]


class TrainingNetwork(Construct):
    """A VPC whose subnets hold training jobs' network interfaces.

    Exposes `vpc`, `security_group` (give it to every job), `training_subnets` and `training_subnet_ids`.
    With `mlflow_tracking_server_arn`, jobs reach SageMaker managed MLflow through an interface
    endpoint, and upload artifacts to its artifact store through the S3 gateway endpoint.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        reachable_buckets: Sequence[s3.IBucket],
        log_key: kms.IKey,
        log_retention_days: int,
        subnet_count: int = 1,
        availability_zone_ids: Sequence[str] = (),
        nat_gateway: bool = False,
        interface_endpoints: Sequence[str] = (),
        mlflow_tracking_server_arn: str | None = None,
        inter_container_encryption: bool = False,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        training_subnet_type = ec2.SubnetType.PRIVATE_WITH_EGRESS if nat_gateway else ec2.SubnetType.PRIVATE_ISOLATED
        subnets = [ec2.SubnetConfiguration(name="training", subnet_type=training_subnet_type, cidr_mask=TRAINING_SUBNET_MASK)]
        if nat_gateway:
            # Only the NAT gateway lives here, on its own Elastic IP: nothing launched here gets a public address.
            public = ec2.SubnetConfiguration(
                name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK, map_public_ip_on_launch=False
            )
            subnets.insert(0, public)

        # AZs as Fn::GetAZs tokens: no context lookup, so synth needs no credentials in any environment.
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(VPC_CIDR),
            availability_zones=[Fn.select(index, Fn.get_azs()) for index in range(subnet_count)],
            subnet_configuration=subnets,
            nat_gateways=1 if nat_gateway else 0,  # stated: the L2 default is one NAT per AZ
            restrict_default_security_group=True,
        )
        if availability_zone_ids:
            self._pin_availability_zone_ids(availability_zone_ids)
        self.training_subnets = ec2.SubnetSelection(subnet_type=training_subnet_type)
        self.training_subnet_ids: list[str] = self.vpc.select_subnets(subnet_type=training_subnet_type).subnet_ids
        for subnet in self.vpc.public_subnets:
            acknowledge(
                subnet.node.find_child("DefaultRoute"),
                *in_every_pack(
                    "VPCNoUnrestrictedRouteToIGW",
                    "The public subnet holds only the NAT gateway (nat_gateway=true); its route to the internet "
                    "gateway is how training jobs in the private subnets reach HTTPS sources.",
                ),
            )

        self._log_key = log_key
        self._log_retention_days = log_retention_days
        self._removal_policy = removal_policy
        flow_log_group = encrypted_log_group(
            self, "FlowLogs", key=log_key, retention_days=log_retention_days, removal_policy=removal_policy
        )
        # The documented confused-deputy guard for the flow-logs role (VPC User Guide, IAM role for
        # publishing flow logs to CloudWatch Logs): only this account's flow logs may assume it.
        stack = Stack.of(self)
        flow_log_role = ManagedPolicyRole(
            self,
            "FlowLogRole",
            assumed_by=iam.ServicePrincipal(
                "vpc-flow-logs.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": stack.format_arn(service="ec2", resource="vpc-flow-log", resource_name="*")},
                },
            ),
            description="Delivers the training VPC's flow logs to their log group",
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group, flow_log_role),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "TrainingSecurityGroup",
            vpc=self.vpc,
            description="Training job nodes: EFA/NCCL among themselves, HTTPS to S3",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA and NCCL: all traffic from the job's own nodes"
        )
        for rule in self.security_group.node.children:
            if isinstance(rule, ec2.CfnSecurityGroupIngress) and rule.ip_protocol == "-1":
                acknowledge(
                    rule,
                    *in_every_pack(
                        "EC2RestrictedCommonPorts",
                        "EFA needs all traffic among a job's own nodes; the only source is this security group "
                        "itself, so no common port is open to any address range.",
                    ),
                )
        # EFA needs this egress rule as well as the ingress one; without it NCCL/OFI hangs.
        self.security_group.add_egress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA and NCCL: all traffic to the job's own nodes"
        )
        if inter_container_encryption:
            for port, what in (
                (ec2.Port.udp(500), "IKE"),
                (ec2.Port(protocol=ec2.Protocol.ESP, string_representation="ESP"), "ESP"),
            ):
                self.security_group.add_ingress_rule(self.security_group, port, f"Inter-container encryption: {what} from nodes")
                self.security_group.add_egress_rule(self.security_group, port, f"Inter-container encryption: {what} to nodes")
        skip_checkov(
            self.security_group,
            ("CKV2_AWS_5", "Attached at run time: every training job's VpcConfig names this group."),
        )

        self.s3_endpoint = self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.training_subnets]
        )
        endpoint_buckets = [
            resource for bucket in reachable_buckets for resource in (bucket.bucket_arn, bucket.arn_for_objects("*"))
        ]
        if "ecr.dkr" in interface_endpoints:
            # Pulling images through the ECR endpoint fetches layers from this AWS-owned bucket.
            endpoint_buckets.append(f"arn:{Aws.PARTITION}:s3:::prod-{Aws.REGION}-starport-layer-bucket/*")
        self.s3_endpoint.add_to_policy(
            iam.PolicyStatement(
                sid="OnlyTheProjectBuckets",
                principals=[iam.AnyPrincipal()],
                actions=S3_ENDPOINT_ACTIONS,
                resources=endpoint_buckets,
            )
        )
        self.security_group.add_egress_rule(
            ec2.Peer.prefix_list(self._s3_prefix_list_id()), ec2.Port.tcp(HTTPS), "HTTPS to S3 through the gateway endpoint"
        )

        if nat_gateway:
            # What the NAT is for: pip, model hubs and other HTTPS sources on the internet. HTTPS only;
            # anything else a job needs from outside is a deliberate change to this rule.
            self.security_group.add_egress_rule(
                ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS), "HTTPS to the internet through the NAT gateway"
            )

        for service in interface_endpoints:
            self._interface_endpoint(service, ec2.InterfaceVpcEndpointAwsService(service), service)
        if mlflow_tracking_server_arn:
            # Jobs in isolated subnets reach managed MLflow's host (https://<region>.experiments.sagemaker.aws,
            # which the sagemaker-mlflow plugin calls) only through this endpoint, whose private DNS name
            # resolves it in the VPC (SageMaker Developer Guide, "Connecting to an MLflow tracking server
            # through an Interface VPC Endpoint"). An MLflow App's host is another one, whose private path no
            # page read here documents.
            self._interface_endpoint(
                "sagemaker.experiments", ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_EXPERIMENTS, "SageMaker managed MLflow"
            )
            # A job uploads artifacts (the model) with URLs the server presigns (SAGEMAKER_PRESIGNED_URL_UPLOAD_ENABLED),
            # so the request is the server role's, to the server's artifact store: a bucket the gateway
            # endpoint's policy must admit, or the upload is refused and the job logs no model.
            self.s3_endpoint.add_to_policy(
                iam.PolicyStatement(
                    sid="MlflowArtifactStore",
                    principals=[iam.AnyPrincipal()],
                    actions=MLFLOW_ARTIFACT_UPLOAD_ACTIONS,
                    resources=[f"arn:{Aws.PARTITION}:s3:::{self._mlflow_artifact_bucket(mlflow_tracking_server_arn)}/*"],
                )
            )

    def _interface_endpoint(self, name: str, service: ec2.InterfaceVpcEndpointAwsService, what: str) -> None:
        """An endpoint in the training subnets that only the training security group may reach, on its port."""
        endpoint = self.vpc.add_interface_endpoint(f"Endpoint-{name}", service=service, subnets=self.training_subnets, open=False)
        endpoint.connections.allow_default_port_from(self.security_group, f"Training jobs to {what}")

    def _pin_availability_zone_ids(self, availability_zone_ids: Sequence[str]) -> None:
        """Place subnets by AZ *ID* (stable across accounts; capacity reservations are per AZ ID)."""
        for subnet_group in (self.vpc.public_subnets, self.vpc.private_subnets, self.vpc.isolated_subnets):
            if not subnet_group:
                continue
            for subnet, az_id in zip(subnet_group, availability_zone_ids, strict=True):
                cfn_subnet = subnet.node.default_child
                cfn_subnet.add_property_deletion_override("AvailabilityZone")
                cfn_subnet.add_property_override("AvailabilityZoneId", az_id)

    def _s3_prefix_list_id(self) -> str:
        """The region's S3 prefix list, resolved at deploy time (a synth-time lookup would need credentials).

        CDK's handler for the lookup gets a role of ours: its permissions in a managed policy, its
        logs in an encrypted group with the stack's retention (CDK's default role writes to a log
        group that never expires, through an AWS managed policy). Every AwsCustomResource of a stack
        runs in that one handler (a singleton), so later lookups add their permission to this role.
        """
        handler_logs = encrypted_log_group(
            self,
            "S3PrefixListLogs",
            key=self._log_key,
            retention_days=self._log_retention_days,
            removal_policy=self._removal_policy,
        )
        handler_role = ManagedPolicyRole(
            self,
            "S3PrefixListRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="CDK's deploy-time handler that looks up the region's S3 prefix list",
        )
        handler_role.add_to_policy(iam.PolicyStatement(actions=["ec2:DescribePrefixLists"], resources=["*"]))
        handler_logs.grant_write(handler_role)
        self._lookup_role, self._lookup_logs = handler_role, handler_logs
        lookup = cr.AwsCustomResource(
            self,
            "S3PrefixList",
            on_update=cr.AwsSdkCall(
                service="EC2",
                action="describePrefixLists",
                parameters={"Filters": [{"Name": "prefix-list-name", "Values": [f"com.amazonaws.{Aws.REGION}.s3"]}]},
                physical_resource_id=cr.PhysicalResourceId.of(f"s3-prefix-list-{Aws.REGION}"),
                output_paths=["PrefixLists.0.PrefixListId"],
            ),
            role=handler_role,
            log_group=handler_logs,
            memory_size=128,  # stated, not defaulted: one small SDK call per deploy
            install_latest_aws_sdk=False,
        )
        acknowledge(
            handler_role,
            (
                "AwsSolutions-IAM5[Resource::*]",
                "ec2:DescribePrefixLists supports only resource '*' (it is a read-only list call).",
            ),
        )
        return lookup.get_response_field("PrefixLists.0.PrefixListId")

    def _mlflow_artifact_bucket(self, server_arn: str) -> str:
        """The bucket of the tracking server's (or MLflow App's) artifact store (`s3://<bucket>/<prefix>`),
        read at deploy time from DescribeMlflowTrackingServer (DescribeMlflowApp), on the lookup handler."""
        action, parameters = (
            ("describeMlflowApp", {"Arn": server_arn})
            if is_mlflow_app(server_arn)
            else ("describeMlflowTrackingServer", {"TrackingServerName": resource_name(server_arn)})
        )
        self._lookup_role.add_to_policy(
            iam.PolicyStatement(actions=[f"sagemaker:{action[0].upper()}{action[1:]}"], resources=[server_arn])
        )
        lookup = cr.AwsCustomResource(
            self,
            "MlflowArtifactStore",
            on_update=cr.AwsSdkCall(
                service="SageMaker",
                action=action,
                parameters=parameters,
                physical_resource_id=cr.PhysicalResourceId.of(f"mlflow-artifact-store-{server_arn}"),
                output_paths=["ArtifactStoreUri"],
            ),
            role=self._lookup_role,
            log_group=self._lookup_logs,
            memory_size=128,
            install_latest_aws_sdk=False,
        )
        return Fn.select(2, Fn.split("/", lookup.get_response_field("ArtifactStoreUri")))
