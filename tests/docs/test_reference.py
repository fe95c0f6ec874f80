"""The docs site's reference pages are what tools/docs_reference.py renders now, from the job spec's
schema and the CLI's parser, whatever the terminal."""

from __future__ import annotations

from tools import docs_reference
from trainstack.spec import JobSpec


def test_the_committed_spec_reference_is_what_the_schema_renders():
    committed = (docs_reference.REFERENCE / "job-spec.md").read_text()
    assert committed == docs_reference.job_spec_page(), "run `make docs-reference` and review the diff"


def test_the_committed_cli_reference_is_what_the_parser_renders():
    committed = (docs_reference.REFERENCE / "cli.md").read_text()
    assert committed == docs_reference.cli_page(), "run `make docs-reference` and review the diff"


def test_the_cli_reference_is_the_same_at_any_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = docs_reference.cli_page()
    monkeypatch.setenv("COLUMNS", "400")

    assert docs_reference.cli_page() == narrow


def test_the_spec_reference_has_a_row_for_every_field_of_every_object():
    sections = {section.split("\n", 1)[0]: section for section in docs_reference.job_spec_page().split("\n## ")[1:]}
    models = docs_reference.spec_models(JobSpec)

    assert set(sections) == set(models)
    for name, model in models.items():
        assert [field for field in model.model_fields if f"| `{field}` |" not in sections[name]] == [], name


def test_the_spec_reference_gives_a_default_factorys_value():
    # The schema leaves out `restarts.on`'s default (a default_factory); the page gives it.
    assert '| `on` | list of `"infrastructure"` or `"unknown"` | `["infrastructure"]` |' in docs_reference.job_spec_page()


def test_the_cli_reference_gives_a_zero_default():
    # 0 equals False: `--port`'s default must not read as a flag's.
    assert "| `--port PORT` | `0` |" in docs_reference.cli_page()
