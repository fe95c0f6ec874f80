"""The plan Validate and `trainstack plan` give: verdicts, the suggested fix, the worst-case cost,
and every capacity option planned. Pure: no AWS, no torch."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from tests.core.specs import DDP, FSDP, PROJECT_IMAGE
from trainstack.instances import CATALOG
from trainstack.planner.cost import STARTUP_SECONDS
from trainstack.planner.speed import FSDP2_HOST_SECONDS_PER_LAYER, MFU_CEILING
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.spec import Restarts, parse_spec
from trainstack.workflow import CAPACITY_RETRIES
from trainstack_cli.plan_view import show
from trainstack_contract.checkpoint_cadence import checkpoint_interval_seconds, job_mttf_seconds

RESTARTS = Restarts().max  # the default restarts per trial

LLAMA_13B = {"layers": 40, "hidden": 5120, "heads": 40, "vocab": 32000, "ffn_hidden": 13824, "seq_len": 4096}
USER_SCRIPT = {"source_dir": "s3://my-code/llama/sourcedir.tar.gz", "entry_point": "train_llama.py"}


def spec(**changes) -> dict:
    return {**DDP, "inputs": {}, "spot": {"enabled": False}, "warm_pool": None, **changes}


def llama_13b(**changes) -> dict:
    """The classic setup: LLaMA-13B, SageMaker data parallel on 8 x ml.p4d.24xlarge, bf16."""
    base = {
        **USER_SCRIPT,
        "framework_version": "2.2.0",
        "instance_count": 8,
        "distribution": {"smdistributed": {"dataparallel": {"enabled": True}}},
        "model": {**LLAMA_13B, "micro_batch_size": 1, "precision": "bf16"},
    }
    return spec(**{**base, **changes})


def plan_of(data: dict):
    return preflight(parse_spec({**data, "force": True})).plan


def refusal(data: dict) -> str:
    with pytest.raises(SpecRejectedError) as raised:
        preflight(parse_spec(data))
    return str(raised.value)


def test_llama_13b_with_pure_data_parallel_on_p4d_does_not_fit():
    plan = plan_of(llama_13b())
    (option,) = plan.options
    gib = option.memory.categories()
    assert not plan.fits
    assert option.memory.total > 200 * 1024**3  # the whole model with AdamW: ~16 bytes per parameter
    assert gib["optimizer"] == pytest.approx(2 * gib["parameters"], rel=1e-6)  # fp32 exp_avg, exp_avg_sq per fp32 weight


def test_validate_refuses_it_with_the_breakdown_and_the_cheapest_change_that_fits():
    message = refusal(llama_13b())
    assert 'instance_type = "ml.p4d.24xlarge": needs' in message and "GiB per GPU" in message
    assert "parameters 48.5, gradients 48.5, optimizer 97.0" in message
    assert "strategy: fsdp" in message and "fits at" in message and "force: true" in message


def test_the_suggested_change_fits_and_sharding_with_checkpointing_fits_on_the_same_cluster():
    (option,) = plan_of(llama_13b()).options
    assert option.suggestion is not None and option.suggestion.memory.fits
    model = {**LLAMA_13B, "micro_batch_size": 1, "precision": "bf16", "activation_checkpointing": True}
    assert plan_of(llama_13b(distribution=None, strategy="fsdp", model=model)).fits


def test_force_launches_a_job_the_plan_refuses():
    checked = preflight(parse_spec({**llama_13b(), "force": True}))
    assert not checked.plan.fits and checked.plan.launchable


def test_a_model_that_fits_is_planned_with_speed_and_cost():
    plan = plan_of(spec())
    (option,) = plan.options
    assert plan.fits and plan.launchable
    assert option.speed.tokens_per_second > 0 and 0 < option.speed.mfu <= MFU_CEILING  # the MFU curve's bound
    assert 0 < option.scaling_efficiency <= 1  # two nodes are never faster per GPU than one
    assert option.cost.expected_usd is not None and option.cost.expected_usd < option.cost.worst_case_usd


def test_the_worst_case_counts_every_job_a_run_may_create_and_every_trial():
    data = spec(retry_attempts=2, max_runtime="10h", sweep={"max_concurrency": 2, "trials": [{"lr": 1e-4}, {"lr": 3e-4}]})
    plan = plan_of(data)
    price = CATALOG["ml.p4d.24xlarge"].price_per_hour
    assert plan.worst_case_usd == pytest.approx(2 * price * 10 * (1 + 2 + CAPACITY_RETRIES + RESTARTS) * 2)


def test_a_spot_runs_worst_case_is_billed_up_to_max_wait():
    plan = plan_of(spec(spot={"enabled": True, "max_wait": "48h"}, max_runtime="24h"))
    price = CATALOG["ml.p4d.24xlarge"].price_per_hour
    assert plan.worst_case_usd == pytest.approx(2 * price * 48 * (1 + CAPACITY_RETRIES + RESTARTS))


def test_a_budget_below_the_worst_case_is_refused_with_the_arithmetic():
    price = CATALOG["ml.p4d.24xlarge"].price_per_hour
    message = refusal(spec(max_runtime="10h", budget={"max_usd": 100}, restarts={"max": 0}))
    assert f"budget.max_usd = 100: the run may cost up to ${2 * price * 10 * (1 + CAPACITY_RETRIES):,.0f}" in message
    assert f"2 x ml.p4d.24xlarge at ${price:,.2f}/h x 10 h x {1 + CAPACITY_RETRIES} jobs per trial" in message


def test_each_restart_the_spec_allows_counts_as_a_whole_job_in_the_worst_case():
    price = CATALOG["ml.p4d.24xlarge"].price_per_hour
    none, five = (plan_of(spec(max_runtime="10h", restarts={"max": n})).worst_case_usd for n in (0, 5))
    assert five - none == pytest.approx(2 * price * 10 * 5)


def test_every_catalog_type_has_a_list_price_but_those_without_an_on_demand_rate():
    unpriced = sorted(name for name, instance in CATALOG.items() if instance.price_per_hour is None)
    assert unpriced == ["ml.p5e.48xlarge", "ml.p6e-gb200.36xlarge", "ml.trn2.48xlarge"]


def test_a_cpu_job_with_a_budget_is_priced_and_passes():
    data = spec(instance_type="ml.m5.xlarge", instance_count=1, strategy="ddp", distribution=None, max_runtime="1h",
                budget={"max_usd": 10}, hyperparameters={"model": "gpt-tiny"})  # fmt: skip
    plan = preflight(parse_spec(data)).plan
    assert plan.within_budget and 0 < plan.worst_case_usd < 10


def test_a_budget_on_a_type_without_an_on_demand_rate_is_refused_with_why():
    message = refusal(spec(instance_type="ml.p5e.48xlarge", budget={"max_usd": 100}))
    assert "ml.p5e.48xlarge has no on-demand list price" in message and "remove the budget" in message


def test_a_budget_above_the_worst_case_passes():
    assert preflight(parse_spec(spec(max_runtime="1h", budget={"max_usd": 100_000}))).plan.within_budget


def test_every_capacity_option_is_planned_and_one_that_would_oom_is_refused():
    hyperparameters = {"model": "gpt-7b", "micro_batch_size": 4, "precision": "bf16"}
    data = spec(
        strategy="fsdp", distribution=None, framework_version="2.7.1", instance_count=1, hyperparameters=hyperparameters,
        instance_type=None, instance_types=["ml.p4de.24xlarge", "ml.p4d.24xlarge"],
    )  # fmt: skip
    plan = plan_of(data)
    assert [o.fits for o in plan.options] == [True, False]
    message = refusal({**data, "force": False})
    assert message.startswith('instance_types[1] = "ml.p4d.24xlarge": needs')


def test_a_user_script_without_a_model_block_launches_unplanned():
    checked = preflight(parse_spec(spec(**USER_SCRIPT)))
    (option,) = checked.plan.options
    assert option.memory is None and "model:" in option.note
    assert checked.plan.launchable


def test_a_classifier_is_not_planned():
    checked = preflight(parse_spec(spec(hyperparameters={"model": "mnist-cnn"})))
    assert checked.plan.options[0].note == "model 'mnist-cnn' is a small classifier: nothing to plan"


def test_the_plan_as_json_states_the_verdict_as_booleans():
    report = plan_of(llama_13b()).to_json()
    assert (report["fits"], report["within_budget"], report["launchable"]) == (False, True, True)
    (option,) = report["options"]
    assert option["memory_gib"]["total"] > option["memory_gib"]["usable"]
    assert option["suggestion"]["change"].startswith(("strategy: fsdp", "instance_count", "instance_type"))


def fsdp_7b_on_one_g5(**hyperparameters) -> dict:
    """gpt-7b under FSDP2 on the eight 24 GB A10Gs of one ml.g5.48xlarge, accumulating 8 micro-batches."""
    hyperparameters = {
        "model": "gpt-7b",
        "grad_accum": 8,
        "micro_batch_size": 1,
        "activation_checkpointing": True,
        **hyperparameters,
    }
    return {
        **spec(**FSDP),
        "instance_type": "ml.g5.48xlarge",
        "instance_count": 1,
        "hyperparameters": {**FSDP["hyperparameters"], **hyperparameters},
    }


def test_fsdp_accumulation_reduces_every_micro_step_by_default_when_only_that_fits():
    checked = preflight(parse_spec(fsdp_7b_on_one_g5()))

    assert checked.spec.hyperparameters["reduce_every_micro_step"] is True
    assert checked.plan.fits


def test_fsdp_accumulation_keeps_its_faster_default_when_that_fits():
    checked = preflight(parse_spec(fsdp_7b_on_one_g5(grad_accum=1)))

    assert "reduce_every_micro_step" not in checked.spec.hyperparameters and checked.plan.fits


def test_an_explicit_accumulation_choice_is_kept_and_the_plan_names_the_change_that_fits():
    message = refusal(fsdp_7b_on_one_g5(reduce_every_micro_step=False))

    assert "hyperparameters.reduce_every_micro_step: true (fits at" in message


def test_reducing_every_micro_step_costs_grad_accum_reduce_scatters_per_step():
    keeping = plan_of(fsdp_7b_on_one_g5(reduce_every_micro_step=False)).options[0].speed
    reducing = plan_of(fsdp_7b_on_one_g5(reduce_every_micro_step=True)).options[0].speed

    assert reducing.communication_seconds > keeping.communication_seconds
    assert reducing.step_seconds >= keeping.step_seconds


HF_LLAMA = "hf:hf_configs/llama-1b"
LLAMA_1B = {"layers": 22, "hidden": 2048, "heads": 32, "kv_heads": 4, "vocab": 32000, "ffn_hidden": 5632, "seq_len": 2048}


def test_a_hugging_face_model_without_its_shape_launches_unplanned_naming_the_fields():
    checked = preflight(parse_spec(spec(hyperparameters={"model": HF_LLAMA}, image=PROJECT_IMAGE)))
    (option,) = checked.plan.options
    assert option.memory is None and option.note.startswith(f"model: state the shape of {HF_LLAMA} (layers, hidden")
    assert checked.plan.launchable


def test_a_hugging_face_model_is_planned_from_the_specs_shape_and_the_scripts_batch():
    hyperparameters = {"model": HF_LLAMA, "seq_len": 2048, "micro_batch_size": 3, "precision": "bf16"}
    plan = plan_of(spec(hyperparameters=hyperparameters, model=LLAMA_1B, image=PROJECT_IMAGE))
    assert (plan.workload.model, plan.workload.seq_len, plan.workload.micro_batch_size) == (HF_LLAMA, 2048, 3)
    assert plan.workload.architecture.layers == 22 and plan.options[0].memory is not None


def test_one_ddp_process_holds_no_gradient_at_its_peak_and_ddp_on_several_ranks_does():
    """One process has no DDP buckets: backward writes the gradients as it frees the activations (tests/planner
    measures the step's peak); several ranks keep them in DDP's buckets throughout."""
    one = plan_of(spec(instance_type="ml.p5.4xlarge", instance_count=1)).options[0].memory
    two = plan_of(spec()).options[0].memory
    assert (one.gradients, one.gradients_between_steps) == (0, False)
    assert two.gradients == two.parameters and two.gradients_between_steps


def test_fsdp2_steps_take_at_least_its_host_work_per_layer():
    hyperparameters = {**FSDP["hyperparameters"], "model": "gpt-125m", "micro_batch_size": 1}
    (option,) = plan_of(spec(**{**FSDP, "instance_count": 1, "hyperparameters": hyperparameters})).options
    assert option.speed.compute_seconds == pytest.approx(12 * FSDP2_HOST_SECONDS_PER_LAYER)  # 12 layers


# Goodput (planner/goodput.py): a gp2 type, whose checkpoint write time the plan knows.
LONG_RUN = {"model": "gpt-350m", "max_steps": 200_000, "precision": "fp16"}


def gp2_plan(**changes):
    return plan_of(spec(**{"instance_type": "ml.p3.16xlarge", "instance_count": 4, "hyperparameters": LONG_RUN, **changes}))


def test_each_option_states_its_goodput_from_the_published_failure_rate_over_its_gpus():
    plan = gp2_plan()
    (option,) = plan.options
    planned, save = option.goodput, option.checkpoint.seconds
    assert planned.mttf_seconds == job_mttf_seconds(32) and not planned.mttf_from_spec
    training = LONG_RUN["max_steps"] * option.speed.step_seconds
    assert planned.expected_failures == pytest.approx(training / planned.mttf_seconds, rel=0.05)
    report = plan.to_json()["options"][0]["goodput"]
    assert (report["checkpoint_cadence"], report["upper_bound"], report["save_seconds"]) == ("auto", False, round(save, 1))
    assert report["checkpoint_interval_seconds"] == pytest.approx(
        checkpoint_interval_seconds(save, planned.mttf_seconds), abs=0.1
    )
    assert report["restart_seconds"]["checkpoint_load"] == round(save, 1)  # the write time as the read time
    assert 0.95 < report["effective_training_fraction"] < 1
    # what the failures and saves bill: saves, work trained again, each restart's start-up and load
    lost_billed = planned.goodput.saving + planned.goodput.retraining
    billed = lost_billed * training + planned.expected_failures * (STARTUP_SECONDS + save)
    assert report["extra_usd"] == pytest.approx(option.cost.hourly * billed / 3600, abs=0.01)


def test_on_local_nvme_the_save_time_is_unknown_and_the_fraction_is_the_most_the_job_can_reach():
    report = plan_of(spec()).to_json()["options"][0]["goodput"]  # 2 x ml.p4d.24xlarge
    assert (report["save_seconds"], report["checkpoint_interval_seconds"], report["upper_bound"]) == (None, None, True)
    restart_only = 1 / (1 + report["restart_seconds"]["total"] / (report["mttf_hours"] * 3600))
    assert report["effective_training_fraction"] == pytest.approx(restart_only, abs=1e-4)


def test_the_specs_mttf_replaces_the_published_rate_and_the_fixed_steps_set_the_interval():
    (option,) = gp2_plan(mttf="12h", hyperparameters={**LONG_RUN, "checkpoint_every": 500}).options
    assert (option.goodput.mttf_seconds, option.goodput.mttf_from_spec) == (12 * 3600, True)
    assert option.goodput.cadence == "every 500 steps"
    assert option.goodput.goodput.interval_seconds == pytest.approx(500 * option.speed.step_seconds)


def test_more_failures_expected_than_restarts_allowed_is_a_warning_naming_restarts_max():
    (option,) = gp2_plan(mttf="6h").options
    failures = option.goodput.expected_failures
    assert RESTARTS < failures < 20
    (warning,) = [w for w in option.warnings if "restarts.max" in w]
    assert f"more than restarts.max ({RESTARTS})" in warning
    assert warning.endswith(f"raise restarts.max to {math.ceil(failures + 3 * math.sqrt(failures))}")
    (quiet,) = gp2_plan(mttf="6h", restarts={"max": 20}).options
    assert not [w for w in quiet.warnings if "restarts.max" in w]
    (beyond,) = gp2_plan(mttf="1h").options
    assert "restarts.max can be at most 20: run it in parts" in next(w for w in beyond.warnings if "restarts.max" in w)


def test_one_node_checkpoints_every_50_steps_and_your_own_script_is_planned_at_autos_interval():
    (single,) = gp2_plan(instance_count=1).options
    assert single.goodput.cadence == "every 50 steps"
    (own,) = plan_of(llama_13b(instance_type="ml.p3.16xlarge", model={**LLAMA_13B, "precision": "fp16"})).options
    assert own.goodput.cadence == "auto's, as if your script checkpointed at it"


def test_trainstack_plan_shows_the_goodput_and_its_restart_by_part():
    out = io.StringIO()
    show(gp2_plan(mttf="12h"), "job.yaml", Console(file=out, width=600))
    report = gp2_plan(mttf="12h").to_json()["options"][0]["goodput"]
    line = next(line for line in out.getvalue().splitlines() if "goodput" in line)
    assert f"{report['effective_training_fraction']:.1%} of the run trains; MTTF 12.0 h (spec)" in line
    assert f"{report['expected_failures']:,.2f} failures expected over the run" in line
    assert f"detection {report['restart_seconds']['detection']:,.0f}, backoff" in line
    assert f"failures and saves add ${report['extra_usd']:,.2f} to the expected cost" in line
