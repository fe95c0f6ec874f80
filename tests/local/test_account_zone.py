"""The emulated account's training subnet sits in one AZ (AccountSettings.availability_zone_id), and
EC2's offerings by AZ ID are moto's snapshot of AWS's own: a type no instance of which the AZ offers
is refused by Validate naming the AZs that do. A module of its own: it needs a twin of its own."""

from __future__ import annotations

import pytest

from tests.local.test_account_twin import spec
from tests.local.twin_runs import start_inline
from trainstack_local.account_twin import AccountSettings
from trainstack_local.emulator import local_aws, training_files
from trainstack_local.pipeline import finish
from trainstack_local.sagemaker_twin import TwinSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_type_not_offered_in_the_training_subnets_az_is_refused_naming_the_azs_that_offer_it(default_stack, tmp_path):
    settings = TwinSettings(account=AccountSettings(availability_zone_id="use1-az3"))  # no p4d there (EC2's offerings)
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path), settings=settings) as (stack, _):
        run = finish(start_inline(stack, spec("elsewhere", "ml.p4d.24xlarge"), "elsewhere"))
    assert run.status == "FAILED"
    assert "p4d.24xlarge is not offered in the training subnet's AZ (use1-az3)" in run.cause
    assert "use1-az1, use1-az2, use1-az4, use1-az6" in run.cause
