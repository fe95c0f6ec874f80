"""The README is the docs site's front page (tools/docs_hooks.py): built into index.md, its links into
docs/ lead to the pages, the pages' links to it lead to the front page, and a second front page in
docs/ fails the build. Each test builds a small site of its own with the project's hooks."""

from __future__ import annotations

from pathlib import Path

from tests.docs.build import ROOT, mkdocs_build

HOOKS = ROOT / "tools" / "docs_hooks.py"


def small_site(tmp_path: Path, readme: str, pages: dict[str, str]) -> Path:
    """A project with the README and docs/ pages given, built with MkDocs' own theme; its config's path."""
    for name, text in pages.items():
        (tmp_path / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / name).write_text(text)
    (tmp_path / "README.md").write_text(readme)
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: small\nuse_directory_urls: false\nhooks:\n  - {HOOKS}\n")
    return config


def test_the_readmes_links_into_docs_lead_to_the_pages(tmp_path):
    readme = "# Small\n\nSee [the concepts](docs/concepts.md#terms) and [the CLI][cli].\n\n[cli]: docs/reference/cli.md\n"
    pages = {"concepts.md": "# Concepts\n\n## Terms\n", "reference/cli.md": "# CLI\n"}
    config = small_site(tmp_path, readme, pages)

    built = mkdocs_build(config, tmp_path / "site")

    assert built.returncode == 0, built.stderr[-3000:]
    front = (tmp_path / "site" / "index.html").read_text()
    assert 'href="concepts.html#terms"' in front and 'href="reference/cli.html"' in front


def test_the_pages_links_to_the_readme_lead_to_the_front_page(tmp_path):
    pages = {
        "concepts.md": "# Concepts\n\n[home](../README.md)\n",
        "reference/cli.md": "# CLI\n\n[home](../../README.md#small)\n",
    }
    config = small_site(tmp_path, "# Small\n", pages)

    built = mkdocs_build(config, tmp_path / "site")

    assert built.returncode == 0, built.stderr[-3000:]
    assert 'href="index.html"' in (tmp_path / "site" / "concepts.html").read_text()
    assert 'href="../index.html#small"' in (tmp_path / "site" / "reference" / "cli.html").read_text()


def test_an_index_page_in_docs_fails_the_build_naming_the_readme(tmp_path):
    config = small_site(tmp_path, "# Small\n", {"index.md": "# Another front page\n"})

    built = mkdocs_build(config, tmp_path / "site")

    assert built.returncode != 0
    assert f"{tmp_path / 'docs' / 'index.md'}: remove it, the site's front page is README.md" in built.stderr
