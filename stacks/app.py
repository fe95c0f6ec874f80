"""Build the CDK app from settings: the same function backs `app.py` and the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk import App, Environment

from stacks.compliance import enable_nag
from stacks.settings import StackSettings
from stacks.training_stack import TrainingStack

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def build_app(context: dict[str, Any] | None = None, *, outdir: str | None = None) -> tuple[App, TrainingStack]:
    """Build the app; `context` overrides cdk.json (as `-c` does). Raises SettingsError on bad settings.

    cdk.json's context (feature flags included) is loaded here too, so an app built in a test is the
    app the CLI builds; under the CLI, its own context (cdk.json plus `-c`) still takes precedence.
    """
    file_context = json.loads(CDK_JSON.read_text())["context"]
    app = App(context={**file_context, **(context or {})}, outdir=outdir)
    settings = StackSettings.from_context(app.node.try_get_context)
    env = None if settings.environment_agnostic else Environment(account=settings.account, region=settings.region)
    stack = TrainingStack(app, settings.name_prefix, settings=settings, env=env)
    enable_nag(app)
    return app, stack
