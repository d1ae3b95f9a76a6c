"""More development headlines for training sentiment: the archive of nirholas/cryptocurrency.cv at its MIT-licensed
commit 843c7d33 (``archive/v2/articles/YYYY-MM.jsonl``), of development publishers and months only.

Two steps; no label is made here.

1. ``pool``: reads the monthly files (extracted from that commit into ``--archive``), keeps English headlines of
   development publishers (``models.splits``: none of the test part's publishers, nothing from 2025-05-01 on, no
   u.today, decrypt.co or bitcoinmagazine.com), drops every headline already in a labelled set of the project
   (exact text, case and punctuation folded; the archive file itself included), and draws ``--n`` of them, spread over publishers and months. Writes
   the items (with their provenance) and the chunks readers see (key and headline only).
2. ``merge``: the three readers' files of each chunk of every batch into ``sentiment_archive_dev.csv`` (majority label, votes kept;
   three different labels: left out) and prints the readers' agreement.

    python models/eval/build_sentiment_archive.py pool --archive DIR --n 8000 --out WORKDIR
    python models/eval/build_sentiment_archive.py merge --out WORKDIR [WORKDIR2 ...]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import json
import random
import re
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.eval.build_sentiment_news import read_votes  # noqa: E402
from models.sentiment.data import LABELS  # noqa: E402
from models.sentiment.metrics import fleiss_kappa  # noqa: E402
from models.splits import split_of  # noqa: E402

EVAL = ROOT / "models" / "eval"
OUT_CSV = EVAL / "sentiment_archive_dev.csv"
REPO, COMMIT = "nirholas/cryptocurrency.cv", "843c7d33294cf05c7a3f87d561378a7c0c24d864"
HELD_BACK = frozenset({"u.today", "decrypt.co", "bitcoinmagazine.com"})
# The archive's `source` names for items without a link (its CryptoPanic import), and their domains. Sources
# that are not one publisher (Twitter, Binance Square, general-market feeds) are not listed and not taken.
SOURCE_DOMAINS = {
    "CoinTelegraph": "cointelegraph.com", "The Block": "theblock.co", "Cryptopolitan": "cryptopolitan.com",
    "Coinedition": "coinedition.com", "Coinspeaker": "coinspeaker.com", "CryptoPotato": "cryptopotato.com",
    "CoinDesk": "coindesk.com", "Dailycoin": "dailycoin.com", "Thedefiant": "thedefiant.io",
    "Livebitcoinnews": "livebitcoinnews.com", "Coincu": "coincu.com", "Cryptodaily": "cryptodaily.co.uk",
    "Coingabbar": "coingabbar.com", "Bitcoin": "news.bitcoin.com", "En": "en.bitcoinsistemi.com",
    "Finbold": "finbold.com", "ZyCrypto": "zycrypto.com", "Crypto Briefing": "cryptobriefing.com",
    "Thecoinrepublic": "thecoinrepublic.com", "Coinpaprika": "coinpaprika.com", "Altcoinbuzz": "altcoinbuzz.io",
    "Cryptoglobe": "cryptoglobe.com", "Protos": "protos.com", "Blockworks": "blockworks.co",
    "Crypto-economy": "crypto-economy.com", "Cryptointelligence": "cryptointelligence.co.uk",
    "Coinpaper": "coinpaper.com", "Bankless": "bankless.com", "Solanafloor": "solanafloor.com",
    "Forkast": "forkast.news", "Tokenist": "tokenist.com", "Coinidol": "coinidol.com",
    "Neonewstoday": "neonewstoday.com", "Cryptovalleyjournal": "cryptovalleyjournal.com",
    "Trustnodes": "trustnodes.com", "Coinscreed": "coinscreed.com",
    # sources that are test-part publishers or held back (listed so that a linkless item of theirs is refused)
    "BeInCrypto": "beincrypto.com", "NewsBTC": "newsbtc.com", "AMBCrypto": "ambcrypto.com",
    "CoinGape": "coingape.com", "CoinPedia": "coinpedia.org", "The Daily Hodl": "dailyhodl.com",
    "CryptoNews": "cryptonews.com", "Bitcoinist": "bitcoinist.com", "CryptoSlate": "cryptoslate.com",
    "Coinjournal": "coinjournal.net", "U.Today": "u.today", "Decrypt": "decrypt.co",
    "Bitcoin Magazine": "bitcoinmagazine.com",
}
PER_SOURCE_CAP = 0.10  # no publisher more than this share of the draw


def fold(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def known_texts() -> set[str]:
    """Every headline of the project's labelled sets, folded."""
    out: set[str] = set()
    archives = sorted(p.name for p in EVAL.glob("sentiment_archive*_dev.csv"))
    for name in ("sentiment_news_dev.csv", "sentiment_news_test.csv", "sentiment_feeds.csv", *archives):
        with (EVAL / name).open(encoding="utf-8") as fh:
            out |= {fold(r["text"]) for r in csv.DictReader(fh)}
    events_parts = sorted(p.name for p in EVAL.glob("events_archive*.jsonl"))
    for name in ("events_unseen.jsonl", "events_validation.jsonl", "sentiment_assets.jsonl", "tagging_news.jsonl",
                 *events_parts):
        for line in (EVAL / name).read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            out.add(fold(d.get("title") or d.get("text") or ""))
    return out


def _english(title: str) -> bool:
    letters = [c for c in title if c.isalpha()]
    return bool(letters) and sum(c.isascii() for c in letters) / len(letters) > 0.97


def pool(archive: Path, n: int, seed: int, out: Path) -> None:
    seen = known_texts()
    cands: dict[str, dict] = {}
    for path in sorted(archive.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            title = " ".join(html.unescape(d.get("title") or "").split())
            link = d.get("link") or d.get("canonical_link")
            domain = urlparse(link).netloc.removeprefix("www.").removeprefix("eng.") if link else \
                SOURCE_DOMAINS.get(d.get("source") or "")
            if not domain or domain in HELD_BACK or domain.endswith(("x.com", "twitter.com", "binance.com")):
                continue
            if SOURCE_DOMAINS.get(d.get("source") or "") in HELD_BACK:
                continue  # a held-back publisher's headline under another site's link ("Bitcoin Magazine" on atlas21.com)
            try:
                at = datetime.fromisoformat(d["pub_date"].replace("Z", "+00:00")).replace(tzinfo=None)
            except (KeyError, ValueError):
                continue
            if split_of(domain, at) != "dev" or at.year < 2023:
                continue
            if len(title.split()) < 5 or title.startswith(("RT @", "@")) or not _english(title):
                continue
            key = fold(title)
            if key in seen or key in cands:
                continue
            cands[key] = {
                "key": hashlib.sha256(f"archive|{d['id']}".encode()).hexdigest()[:16], "title": title,
                "publisher": d.get("source") or domain, "domain": domain, "published_at": at.isoformat(timespec="seconds"),
                "provenance": {"repository": REPO, "commit": COMMIT, "path": f"archive/v2/articles/{path.name}",
                               "id": d["id"], "import_source": (d.get("meta") or {}).get("import_source")},
            }
    rng = random.Random(seed)
    items = sorted(cands.values(), key=lambda d: d["key"])
    rng.shuffle(items)
    cap = max(1, int(n * PER_SOURCE_CAP))
    per: Counter[str] = Counter()
    picked = []
    for d in items:
        if per[d["domain"]] < cap:
            per[d["domain"]] += 1
            picked.append(d)
        if len(picked) == n:
            break
    out.mkdir(parents=True, exist_ok=True)
    (out / "items.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in picked), encoding="utf-8")
    chunk = 1000
    (out / "read").mkdir(exist_ok=True)
    for c in range(0, len(picked), chunk):
        lines = [json.dumps({"key": d["key"], "headline": d["title"]}, ensure_ascii=False) for d in picked[c:c + chunk]]
        (out / "read" / f"chunk{c // chunk + 1}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(json.dumps({"candidates": len(cands), "picked": len(picked), "publishers": len(per),
                      "by_publisher": dict(per.most_common()),
                      "months": dict(sorted(Counter(d["published_at"][:7] for d in picked).items()))}, indent=1))


def merge(outs: list[Path], csv_path: Path = OUT_CSV) -> None:
    items = {d["key"]: d for out in outs
             for d in map(json.loads, (out / "items.jsonl").read_text(encoding="utf-8").splitlines())}
    votes = read_votes([out / "labels" for out in outs])
    rows, three_votes, dropped = [], [], 0
    for key, by_reader in votes.items():
        if len(by_reader) != 3:
            raise SystemExit(f"{key}: {len(by_reader)} readers, expected 3")
        three = [by_reader[r] for r in sorted(by_reader)]
        three_votes.append(three)
        label, count = Counter(three).most_common(1)[0]
        if count < 2:
            dropped += 1
            continue
        it = items[key]
        rows.append({"id": key, "text": it["title"], "label": label, "votes": "|".join(three),
                     "publisher": it["publisher"], "domain": it["domain"], "published_at": it["published_at"]})
    rows.sort(key=lambda r: (r["domain"], r["published_at"], r["id"]))
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=("id", "text", "label", "votes", "publisher", "domain", "published_at"))
        writer.writeheader()
        writer.writerows(rows)
    pairwise = sum(sum(v[i] == v[j] for i in range(3) for j in range(i + 1, 3)) / 3 for v in three_votes)
    print(json.dumps({"headlines": len(rows), "no_majority": dropped, "publishers": len({r["domain"] for r in rows}),
                      "labels": dict(Counter(r["label"] for r in rows)),
                      "unanimous": round(sum(len(set(v)) == 1 for v in three_votes) / len(three_votes), 4),
                      "pairwise_agreement": round(pairwise / len(three_votes), 4),
                      "fleiss_kappa": round(fleiss_kappa(three_votes, LABELS), 4)}, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pool")
    p.add_argument("--archive", type=Path, required=True, help="the monthly files of the commit named above")
    p.add_argument("--n", type=int, default=8000)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--out", type=Path, required=True)
    m = sub.add_parser("merge")
    m.add_argument("--out", type=Path, nargs="+", required=True, help="the work folders of the batches")
    m.add_argument("--csv", type=Path, default=OUT_CSV,
                   help="where to write (batch 2: models/eval/sentiment_archive2_dev.csv; the shipped model learned "
                        "from sentiment_archive_dev.csv, which stays as it was)")
    args = ap.parse_args(argv)
    if args.cmd == "pool":
        pool(args.archive, args.n, args.seed, args.out)
    else:
        merge(args.out, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
