"""The EFA-ready network: what a multi-node job needs, and nothing that costs money idle."""

from __future__ import annotations

from aws_cdk.assertions import Match

from tests.synth import synthesize


def _group_id_ref(stack) -> dict:
    (group_id,) = stack.resources("AWS::EC2::SecurityGroup").keys() - _default_lockdown(stack)
    return {"Fn::GetAtt": [group_id, "GroupId"]}


def _default_lockdown(stack) -> set[str]:
    return {k for k, v in stack.json["Resources"].items() if v["Type"] == "AWS::EC2::SecurityGroup" and "Default" in k}


def test_training_security_group_allows_all_traffic_from_itself(default_stack):
    group = _group_id_ref(default_stack)
    default_stack.template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress", {"IpProtocol": "-1", "GroupId": group, "SourceSecurityGroupId": group}
    )


def test_training_security_group_allows_all_traffic_to_itself(default_stack):
    group = _group_id_ref(default_stack)
    default_stack.template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress", {"IpProtocol": "-1", "GroupId": group, "DestinationSecurityGroupId": group}
    )


def test_training_security_group_egress_is_only_itself_and_https_to_s3(default_stack):
    group = _group_id_ref(default_stack)
    egress = [r["Properties"] for r in default_stack.resources("AWS::EC2::SecurityGroupEgress").values()]
    assert len(egress) == 2
    to_s3 = next(rule for rule in egress if "DestinationPrefixListId" in rule)
    assert (to_s3["IpProtocol"], to_s3["FromPort"], to_s3["ToPort"]) == ("tcp", 443, 443)
    (sg_id,) = group["Fn::GetAtt"][:1]
    inline = default_stack.json["Resources"][sg_id]["Properties"]
    # allow_all_outbound=False renders a placeholder rule to an unroutable address, never 0.0.0.0/0.
    assert all(rule.get("CidrIp") != "0.0.0.0/0" for rule in inline.get("SecurityGroupEgress", []))


def test_no_nat_gateway_by_default(default_stack):
    default_stack.template.resource_count_is("AWS::EC2::NatGateway", 0)
    default_stack.template.resource_count_is("AWS::EC2::InternetGateway", 0)


def test_one_training_subnet_in_one_availability_zone_by_default(default_stack):
    default_stack.template.resource_count_is("AWS::EC2::Subnet", 1)
    default_stack.template.has_resource_properties(
        "AWS::EC2::Subnet", {"AvailabilityZone": {"Fn::Select": [0, {"Fn::GetAZs": ""}]}, "MapPublicIpOnLaunch": False}
    )


def test_s3_gateway_endpoint_is_limited_to_the_project_buckets(default_stack):
    endpoint = next(
        r["Properties"]
        for r in default_stack.resources("AWS::EC2::VPCEndpoint").values()
        if r["Properties"]["VpcEndpointType"] == "Gateway"
    )
    statement = endpoint["PolicyDocument"]["Statement"]
    assert len(statement) == 1
    resources = statement[0]["Resource"]
    assert "*" not in resources
    bucket_ids = {k for k in default_stack.resources("AWS::S3::Bucket") if "AccessLogs" not in k}
    referenced = {r["Fn::GetAtt"][0] for r in resources if isinstance(r, dict) and "Fn::GetAtt" in r}
    referenced |= {
        p["Fn::GetAtt"][0]
        for r in resources
        if isinstance(r, dict) and "Fn::Join" in r
        for p in r["Fn::Join"][1]
        if isinstance(p, dict) and "Fn::GetAtt" in p
    }
    assert bucket_ids <= referenced
    assert not any(action.endswith("*") for action in statement[0]["Action"])


def test_flow_logs_capture_all_traffic_into_an_encrypted_log_group(default_stack):
    default_stack.template.has_resource_properties(
        "AWS::EC2::FlowLog", {"TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"}
    )
    default_stack.template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {"KmsKeyId": {"Fn::GetAtt": [Match.string_like_regexp("StorageKey"), "Arn"]}, "RetentionInDays": 365},
    )


def test_default_security_group_is_locked_down(default_stack):
    default_stack.template.resource_count_is("Custom::VpcRestrictDefaultSG", 1)


def test_nat_gateway_setting_adds_exactly_one_nat_and_routes_training_subnets_through_it():
    stack = synthesize(nat_gateway=True, subnet_count=2)
    stack.template.resource_count_is("AWS::EC2::NatGateway", 1)
    stack.template.has_resource_properties(
        "AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": Match.any_value()}
    )


def test_nat_gateway_setting_lets_training_jobs_reach_the_internet_over_https_only():
    stack = synthesize(nat_gateway=True, subnet_count=2)
    standalone = [r["Properties"] for r in stack.resources("AWS::EC2::SecurityGroupEgress").values()]
    inline = [
        rule
        for g in stack.resources("AWS::EC2::SecurityGroup").values()
        for rule in g["Properties"].get("SecurityGroupEgress", [])
    ]
    to_internet = [rule for rule in standalone + inline if rule.get("CidrIp") == "0.0.0.0/0"]
    assert [(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in to_internet] == [("tcp", 443, 443)]


def test_interface_endpoints_setting_adds_private_endpoints_reachable_from_training_jobs():
    stack = synthesize(interface_endpoints="ecr.api,logs")
    interface = [
        r for r in stack.resources("AWS::EC2::VPCEndpoint").values() if r["Properties"]["VpcEndpointType"] == "Interface"
    ]
    assert len(interface) == 2
    assert all(r["Properties"]["PrivateDnsEnabled"] for r in interface)
    stack.template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress", {"IpProtocol": "tcp", "FromPort": 443, "DestinationSecurityGroupId": Match.any_value()}
    )


def test_no_interface_endpoints_by_default(default_stack):
    kinds = [r["Properties"]["VpcEndpointType"] for r in default_stack.resources("AWS::EC2::VPCEndpoint").values()]
    assert kinds == ["Gateway"]


def test_inter_container_encryption_opens_ike_and_esp_between_nodes_both_ways():
    stack = synthesize(inter_container_encryption=True)
    for kind in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"):
        stack.template.has_resource_properties(kind, {"IpProtocol": "udp", "FromPort": 500, "ToPort": 500})
        stack.template.has_resource_properties(kind, {"IpProtocol": "50", "FromPort": Match.absent()})


def test_without_inter_container_encryption_there_is_no_ike_or_esp_rule(default_stack):
    protocols = {r["Properties"]["IpProtocol"] for r in default_stack.resources("AWS::EC2::SecurityGroupIngress").values()}
    assert protocols == {"-1"}


def test_availability_zone_ids_pin_subnets_by_id_not_name():
    stack = synthesize(availability_zone_ids=["use1-az4", "use1-az6"])
    subnets = [r["Properties"] for r in stack.resources("AWS::EC2::Subnet").values()]
    assert sorted(s["AvailabilityZoneId"] for s in subnets) == ["use1-az4", "use1-az6"]
    assert not any("AvailabilityZone" in s for s in subnets)


def test_explicit_account_and_region_synthesize_without_an_availability_zone_lookup(all_options_stack):
    manifest = (all_options_stack.directory / "manifest.json").read_text()
    assert '"missing"' not in manifest


def test_flow_logs_role_is_assumed_only_by_flow_logs_of_this_account(default_stack):
    (role,) = [r for k, r in default_stack.resources("AWS::IAM::Role").items() if k.startswith("NetworkFlowLogRole")]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ":vpc-flow-log/*" in str(statement["Condition"]["ArnLike"]["aws:SourceArn"])


def test_network_roles_keep_their_permissions_in_managed_policies_not_inline(default_stack):
    inline = [k for k in default_stack.resources("AWS::IAM::Policy") if k.startswith("Network")]
    managed = [k for k in default_stack.resources("AWS::IAM::ManagedPolicy") if k.startswith("Network")]
    assert inline == []
    assert len(managed) == 2  # the flow-logs role's and the prefix-list lookup's


def test_the_prefix_list_lookup_logs_to_an_encrypted_group_that_expires(default_stack):
    (handler,) = [
        r["Properties"]
        for r in default_stack.resources("AWS::Lambda::Function").values()
        if "NetworkS3PrefixListRole" in str(r["Properties"]["Role"])
    ]
    log_group = default_stack.json["Resources"][handler["LoggingConfig"]["LogGroup"]["Ref"]]["Properties"]
    assert "KmsKeyId" in log_group and log_group["RetentionInDays"] == 365


def test_public_subnets_for_the_nat_gateway_give_nothing_a_public_address(all_options_stack):
    public = [r["Properties"] for k, r in all_options_stack.resources("AWS::EC2::Subnet").items() if "publicSubnet" in k]
    assert len(public) == 2
    assert all(subnet["MapPublicIpOnLaunch"] is False for subnet in public)
