"""Write tools/facts/ec2_on_demand.json from Karpenter's generated EC2 price table.

    python -m tools.facts.ec2_prices PATH/TO/zz_generated.pricing_aws.go --commit SHA

SageMaker's training rates are not machine-readable offline and the AWS Price List API needs the
network, so the planner prices a type as its EC2 on-demand rate times a premium (hand_facts.py).
The EC2 rates come from the table aws/karpenter-provider-aws generates from the AWS Pricing API
(pkg/providers/pricing/zz_generated.pricing_aws.go): no package registry carries it, so its us-east-1
rates for the instance types SageMaker trains on are kept here, read from the file rather than typed.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

FACTS = Path(__file__).resolve().parents[2] / "lambda" / "trainstack" / "facts.json"
TABLE = Path(__file__).with_name("ec2_on_demand.json")
REGION = "us-east-1"
SOURCE_PATH = "pkg/providers/pricing/zz_generated.pricing_aws.go"
GENERATED = re.compile(r"// generated at (\S+) for")
RATE = re.compile(r'"([a-z0-9.-]+)": ([0-9.]+)')


def region_rates(go_source: str, region: str = REGION) -> dict[str, float]:
    """The rates of one region's block (`"us-east-1": { ... },`) of the generated Go map."""
    start = go_source.index(f'"{region}": {{')
    end = go_source.index("\n\t},", start)
    return {name: float(rate) for name, rate in RATE.findall(go_source[start:end])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("go_file", type=Path, help=f"Karpenter's {SOURCE_PATH}")
    parser.add_argument("--commit", required=True, help="the aws/karpenter-provider-aws commit the file was read at")
    args = parser.parse_args()
    source = args.go_file.read_text()
    catalog = json.loads(FACTS.read_text())["instances"]
    rates = region_rates(source)
    table = {
        "source": f"aws/karpenter-provider-aws {SOURCE_PATH} at {args.commit}",
        "generated_at": GENERATED.search(source).group(1),
        "region": REGION,
        "rates": {name: rates[name.removeprefix("ml.")] for name in sorted(catalog) if name.removeprefix("ml.") in rates},
    }
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE}: {len(table['rates'])} of {len(catalog)} catalog types priced")


if __name__ == "__main__":
    main()
