#!/usr/bin/env python3
"""The CDK app. Settings come from cdk.json context, overridable with `-c key=value`."""

import sys

from stacks.app import build_app
from stacks.settings import SettingsError

try:
    app, _ = build_app()
except SettingsError as error:
    sys.exit(f"trainstack: invalid setting: {error}")
app.synth()
