"""The feeds file: what loads, and the errors for what does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.ingest import Feed, FeedsFileError, load_feeds


def write(tmp_path: Path, text: str, name: str = "feeds.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_urls_paths_and_file_urls(tmp_path: Path) -> None:
    (tmp_path / "local").mkdir()
    path = write(
        tmp_path,
        f"""
feeds:
  - name: CoinDesk
    url: https://www.coindesk.com/arc/outboundfeeds/rss/
  - name: Decrypt
    url: "  https://decrypt.co/feed  "
    enabled: false
    language: en
  - name: Relative
    url: local/a.xml
  - name: Absolute
    url: {tmp_path}/b.xml
  - name: File URL
    url: file://{tmp_path}/c.xml
""",
    )
    feeds = load_feeds(path)
    assert feeds == [
        Feed("CoinDesk", "https://www.coindesk.com/arc/outboundfeeds/rss/"),
        Feed("Decrypt", "https://decrypt.co/feed", enabled=False, language="en"),
        Feed("Relative", (tmp_path / "local" / "a.xml").as_uri()),
        Feed("Absolute", (tmp_path / "b.xml").as_uri()),
        Feed("File URL", (tmp_path / "c.xml").as_uri()),
    ]


def test_relative_paths_follow_the_yaml_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "conf"
    sub.mkdir()
    path = write(sub, "feeds:\n  - {name: A, url: ../data/a.xml}\n")
    monkeypatch.chdir("/")
    assert load_feeds(path)[0].url == (tmp_path / "data" / "a.xml").as_uri()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("feeds: [", "not valid YAML at line 1"),
        ("sources: []", "top-level `feeds:` list"),
        ("- a\n- b", "top-level `feeds:` list"),
        ("feeds: {name: A}", "must be a list"),
        ("feeds: []", "`feeds:` is empty"),
        # a run fetched nothing and succeeded (a Dagster review, s47)
        ("feeds:\n  - {name: A, url: https://a.com/rss, enabled: false}", "every feed is disabled"),
        ("feeds:\n  - just a string", "entry 1: must be a mapping"),
        ("feeds:\n  - {url: https://a.com/rss}", "entry 1: `name` is missing"),
        ("feeds:\n  - {name: A}", "entry 1 ('A'): `url` is missing"),
        ("feeds:\n  - {name: A, url: https://a.com/rss, urll: x}", "unknown key(s) urll"),
        (
            "feeds:\n  - {name: A, url: https://a.com/rss, enabled: 'yes please'}",
            "`enabled` must be true or false",
        ),
        ("feeds:\n  - {name: A, url: https://a.com/rss, language: 3}", "`language` must be a language code"),
        ("feeds:\n  - {name: A, url: 'ftp://a.com/rss'}", "unsupported scheme"),
        ("feeds:\n  - {name: A, url: 'https:///rss'}", "has no host"),
        ("feeds:\n  - {name: A, url: 'http://127.0.0.1:99999/rss'}", "entry 1 ('A'): url "
         "'http://127.0.0.1:99999/rss' has a port that is not a number in 0-65535"),
        ("feeds:\n  - {name: A, url: 'file://otherhost/x.xml'}", "names a remote host"),
        (
            "feeds:\n  - {name: A, url: 'https://a.com/rss'}\n  - {name: A, url: 'https://b.com/rss'}",
            "entry 2 ('A'): duplicate name 'A' (also entry 1",
        ),
        (
            "feeds:\n  - {name: A, url: 'https://a.com/rss'}\n  - {name: B, url: 'https://a.com/rss'}",
            "entry 2 ('B'): duplicate url",
        ),
    ],
)
def test_bad_files_name_the_file_the_entry_and_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(FeedsFileError) as err:
        load_feeds(path)
    message = str(err.value)
    assert message.startswith(f"feeds file {path}")
    assert expected in message


def test_missing_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(FeedsFileError, match=r"no such file \(pass --feeds FILE"):
        load_feeds(tmp_path / "nope.yaml")


def test_feeds_file_error_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_feeds(write(tmp_path, "feeds: []"))
