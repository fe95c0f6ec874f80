"""MkDocs hooks (mkdocs.yml `hooks:`): the README is the site's front page.

README.md stays the one source of the project's front page, on GitHub and on the site: the build
adds it as index.md, its links into docs/ made relative to the site's root (`](docs/concepts.md)`
becomes `](concepts.md)`). The pages of docs/ may link back to it as `../README.md`; those links
become `index.md`. Any other link out of docs/ fails the strict build (MkDocs' own link check).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.livereload import LiveReloadServer
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

FRONT_PAGE = "index.md"
# What comes before a link's target: an inline link's or image's `](`, or a reference definition's `[name]: `.
LINK_START = r"(\]\(|^\[[^\]\n]+\]:[ \t]*)"
INTO_DOCS = re.compile(LINK_START + r"(?:\./)?docs/", re.MULTILINE)


def readme(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).parent / "README.md"


def front_page(readme_text: str) -> str:
    """The README's text as the site's index.md."""
    return INTO_DOCS.sub(r"\1", readme_text)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    if files.get_file_from_path(FRONT_PAGE) is not None:
        # Two front pages would drift apart; the README is the one GitHub shows.
        raise PluginError(f"{Path(config.docs_dir) / FRONT_PAGE}: remove it, the site's front page is README.md")
    files.append(File.generated(config, FRONT_PAGE, content=front_page(readme(config).read_text())))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == FRONT_PAGE:
        return markdown
    # From docs/reference/cli.md the README is ../../README.md, and the front page ../index.md.
    depth = page.file.src_uri.count("/")
    to_readme = re.compile(LINK_START + re.escape("../" * (depth + 1) + "README.md"), re.MULTILINE)
    return to_readme.sub(lambda match: match.group(1) + "../" * depth + FRONT_PAGE, markdown)


def on_serve(server: LiveReloadServer, config: MkDocsConfig, builder: object) -> LiveReloadServer:
    # `mkdocs serve` watches docs_dir only; the front page's source is outside it.
    server.watch(str(readme(config)))
    return server
