"""The table of well-known jobs in docs/job-spec.md is what the planner says today."""

from __future__ import annotations

from tools import plan_table
from tools.readme_section import section


def test_the_plan_table_is_rendered_from_the_planner():
    written = section(plan_table.START, plan_table.END, plan_table.DOC)
    assert written == plan_table.render(), "run `.venv/bin/python -m tools.plan_table`"


def test_llama_13b_with_pure_data_parallel_on_p4d_is_shown_as_not_fitting():
    rows = [line for line in plan_table.render().splitlines() if line.startswith("| 13B |")]
    assert rows and all("**does not fit**" in row for row in rows)
