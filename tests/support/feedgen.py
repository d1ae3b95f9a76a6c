"""Small RSS/Atom documents for ingestion tests, written the way real feeds write them."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

NAMESPACES = (
    'xmlns:content="http://purl.org/rss/1.0/modules/content/" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:media="http://search.yahoo.com/mrss/"'
)


def item(
    title: str | None = "An article",
    link: str | None = None,
    *,
    guid: str | None = None,
    permalink: bool = False,
    pub: str | None = "Mon, 03 Mar 2025 10:00:00 +0000",
    description: str | None = "A summary.",
    content: str | None = None,
    creators: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    image: str | None = None,
    raw: str = "",
) -> str:
    """One ``<item>``; text is escaped here, ``raw`` is appended as is."""
    parts = ["<item>"]
    if title is not None:
        parts.append(f"<title>{escape(title)}</title>")
    if link is not None:
        parts.append(f"<link>{escape(link)}</link>")
    if guid is not None:
        parts.append(f'<guid isPermaLink="{str(permalink).lower()}">{escape(guid)}</guid>')
    if pub is not None:
        parts.append(f"<pubDate>{escape(pub)}</pubDate>")
    if description is not None:
        parts.append(f"<description>{escape(description)}</description>")
    if content is not None:
        parts.append(f"<content:encoded><![CDATA[{content}]]></content:encoded>")
    parts += [f"<dc:creator>{escape(c)}</dc:creator>" for c in creators]
    parts += [f"<category>{escape(c)}</category>" for c in categories]
    if image is not None:
        parts.append(f'<media:content url={quoteattr(image)} medium="image"/>')
    parts.append(raw)
    parts.append("</item>")
    return "".join(parts)


def rss(
    *items: str, title: str = "Test feed", language: str | None = "en", declaration: str | None = None
) -> str:
    decl = declaration if declaration is not None else '<?xml version="1.0" encoding="UTF-8"?>'
    lang = f"<language>{language}</language>" if language else ""
    return (
        f'{decl}\n<rss version="2.0" {NAMESPACES}><channel><title>{escape(title)}</title>'
        f"<link>https://example.com/</link>{lang}{''.join(items)}</channel></rss>\n"
    )


def atom_entry(title: str, link: str | None, *, id: str, published: str | None, summary: str = "") -> str:
    href = f'<link rel="alternate" href={quoteattr(link)}/>' if link else ""
    pub = f"<published>{published}</published>" if published else ""
    return (
        f"<entry><title>{escape(title)}</title>{href}<id>{escape(id)}</id>{pub}"
        f'<summary type="html">{escape(summary)}</summary></entry>'
    )


def atom(*entries: str, title: str = "Test Atom feed") -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom" xml:lang="en">'
        f"<title>{escape(title)}</title><id>urn:test</id><updated>2025-03-03T10:00:00Z</updated>"
        f"{''.join(entries)}</feed>\n"
    )
