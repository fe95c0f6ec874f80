"""Developer tools that read what the CDK app synthesizes (not deployed)."""
