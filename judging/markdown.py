"""Problem statements: Markdown rendered by markdown-it-py, then sanitised by nh3.

Raw HTML in a statement is not rendered (markdown-it's `html` option is off), and nh3's
allow-list removes anything a renderer could still emit that a page must not run: scripts,
event handlers, `javascript:` links, styles. Links to other sites get `rel="noopener
noreferrer nofollow"`.
"""

import nh3
from markdown_it import MarkdownIt

_renderer = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")

ALLOWED_TAGS = {
    "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "img", "li", "ol", "p",
    "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul", "del", "sub", "sup",
}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "th": {"align"}, "td": {"align"}}


def render_statement(text: str, *, title: str = "") -> str:
    """Safe HTML for `text` (Markdown). A first heading that only repeats the problem's
    title is left out: the page shows the title already."""
    lines = (text or "").lstrip().splitlines()
    if lines and title and lines[0].lstrip("#").strip() == title.strip() and lines[0].startswith("# "):
        lines = lines[1:]
    html = _renderer.render("\n".join(lines))
    return nh3.clean(html, tags=ALLOWED_TAGS, attributes=ALLOWED_ATTRIBUTES, url_schemes={"http", "https", "mailto"},
                     link_rel="noopener noreferrer nofollow")
