"""Finding the assets a headline mentions.

Everything is looked up in dicts built once from the registry; a headline is tokenised once and each token
costs a few dict lookups (no per-asset regex). The rules, in order of evidence:

- strong: a cashtag ($LINK), a trading pair (BTC/USD, ETH-USDT, BTCUSDT), an unambiguous symbol in upper case
  (BTC, XRP), a name or alias in any case (Bitcoin, ether, USD Coin), possessive and hyphenated forms included.
- an ambiguous symbol in upper case (ONE, LINK, DOT, NEAR, ...) counts when the text is about crypto (a crypto
  word or another asset) and is not written in capitals for emphasis, or when a price or crypto word is within
  three tokens ("DOT Sinks 2%").
- a weak name (Near, Flow, Cosmos, Curve, ...) counts only next to a crypto noun ("Flow blockchain", "Sui
  network", "DeFi protocol Curve"), a price move with a figure ("Near jumps 8%"), or in a list with another
  asset ("Dogecoin, Pepe and Solana").
- an app name (Uniswap, Lido, Axie Infinity: the app, protocol, game or firm as well as its token) counts only
  next to a token word ("Uniswap token", "Aave price"), with a price move and a figure ("Aave jumps 8%"), beside
  its own symbol ("Uniswap (UNI)"), or in a list with another asset; "Uniswap goes live on Polygon" names none.
- single-letter symbols (S, A, W) only as cashtags or in pairs.
- in a pair the quote currency is not a mention when it is fiat or a stablecoin (ETH-USDT -> ETH only).
- companies are not assets: "Coinbase", "Binance", "Ripple", "Tether" give nothing by themselves.
"""

from __future__ import annotations

from models.tagging.registry import Asset
from models.tagging.text import CASHTAG, MONEY, PCT, WORD, Tokens, tokenize

# Quote currencies of trading pairs. Fiat and stablecoin quotes are not mentions of their own.
STABLE_QUOTES = frozenset({"USD", "USDT", "USDC", "BUSD", "FDUSD", "TUSD", "DAI", "EUR", "EURC", "GBP", "JPY",
                           "KRW", "TRY", "BRL", "AUD", "CAD", "CHF", "USDE", "PYUSD", "RLUSD", "USD1"})
QUOTES = STABLE_QUOTES | {"BTC", "ETH", "BNB", "SOL", "XBT"}
_CONCAT_QUOTES = ("USDT", "USDC", "FDUSD", "BUSD", "USD", "PERP")

# Words that make a text about crypto (lower case, possessive already stripped).
CRYPTO_WORDS = frozenset("""
crypto cryptos cryptocurrency cryptocurrencies token tokens coin coins altcoin altcoins memecoin memecoins
stablecoin stablecoins blockchain blockchains defi nft nfts web3 onchain staking stakers airdrop airdrops
mainnet testnet dex dexs dexes dao daos hodl hodlers satoshi satoshis sats tokenholders validators
""".split())

# Price and market words: near an ambiguous symbol they make it a ticker ("DOT Sinks 2%").
PRICE_WORDS = frozenset("""
price prices priced rally rallies rallied surge surges surged surging soar soars soared soaring jump jumps
jumped climb climbs climbed gain gains gained rise rises rose rising fall falls fell falling drop drops
dropped slide slides slid sink sinks sank slump slumps slumped plunge plunges plunged tumble tumbles tumbled
crash crashes crashed dip dips dipped rebound rebounds rebounded spike spikes spiked tank tanks tanked
pump pumps pumped dump dumps dumped breakout bulls bears bullish bearish ath outperforms underperforms
trades trading holders whales futures perps perpetuals liquidations
""".split()) | CRYPTO_WORDS | {"etf", "etfs", "network", "protocol", "chain", "ecosystem", "foundation"}

# After a weak name these make it the asset ("Flow blockchain", "Sui network", "Monad presale").
NOUNS_AFTER = frozenset("""
price prices token tokens coin coins network networks blockchain chain mainnet testnet protocol ecosystem
foundation etf etfs holders whales staking dao defi memecoin airdrop presale launch validators nodes
bridge ledger labs treasury futures l1 l2 fee fees upgrade upgrades fork
""".split())
# Before a weak name (within two tokens) these make it the asset ("DeFi protocol Curve", "layer-2 Blast").
NOUNS_BEFORE = frozenset("""
protocol protocols network networks blockchain blockchains token tokens coin coins memecoin memecoins
altcoin altcoins layer l2 rollup rollups dex defi stablecoin
""".split())
# After an app name these make it the token ("Uniswap token", "Aave price"); the app's own nouns (DAO, protocol,
# labs, v3) do not.
TOKEN_AFTER = frozenset("""
price prices token tokens coin coins holders whales futures etf etfs airdrop airdrops memecoin
""".split())
TOKEN_BEFORE = frozenset({"token", "tokens", "coin", "coins", "altcoin", "altcoins"})
# Price moves only: "Aave protocol $10M" is the app, "Aave jumps 8%" the token.
MOVE_WORDS = PRICE_WORDS - CRYPTO_WORDS - {"etf", "etfs", "network", "protocol", "chain", "ecosystem", "foundation",
                                           "trades", "trading", "holders", "whales", "futures", "perps", "perpetuals",
                                           "liquidations"}
# "USDT on Tron", "USDC on Sui": an asset carried on a chain.
CARRIED_ON = frozenset({"on", "to"})
# After an upper-case ambiguous symbol these show an acronym, not a ticker ("APT group", "DOT officials").
ACRONYM_AFTER = frozenset({"group", "groups", "hackers", "actor", "actors", "officials", "department", "secretary"})
HYPHEN_AFTER = frozenset({"based", "backed", "powered", "native", "focused", "linked", "denominated"})
LIST_WORDS = frozenset({"and", "or", "vs", "versus"})
# After an asset's name these make a fund, a technology or another coin of it ("Solana Ventures", "Ethereum Virtual
# Machine", "Ethereum-compatible", "Ethereum clone CheapETH"): no reader took them for the asset. Not "Foundation", "Labs" or "Trust": the labelled sets
# disagree on those ("Ethereum Foundation launches zkAPI" is ETH in one, "Ethereum Foundation outlines grants" not).
NAMED_AFTER = frozenset({"ventures", "virtual", "clone", "clones"})

# Upper-case words that are common acronyms rather than emphasis ("SEC", "ETF"); used to tell a headline
# written in capitals for emphasis ("BIG Crypto Fake-Out! RISK On!") from one that merely names agencies.
ACRONYMS = frozenset("""
SEC CFTC FDIC OCC IMF ECB BIS FOMC FED CPI PPI GDP ETF ETFS ETP ETPS CEO CFO CIO CTO COO USA UAE EU UK US
USD EUR GBP JPY DOJ FBI IRS DTCC NYSE NASDAQ SPAC IPO ATH TVL FDV NFT NFTS DAO DEX CEX API RWA RWAS AI AGI
MICA ESMA FCA MAS SFC HKMA RBI SVB OKX HTX BNY JPMORGAN TPS EIP BIP RFQ OTC KYC AML ICO IDO IEO TGE LLC
LLP INC PLC DEFI CBDC CBDCS FTX SBF CZ CNN BBC NBA NFL FIFA GPT LLM NASA UN NATO OPEC VIX SPX DXY ESG DC
""".split())


# A mention: (symbol, token index). Plain tuples: a headline makes a few and they are built per call.
Mention = tuple[str, int]


class TickerIndex:
    """Lookup tables built once from the registry."""

    def __init__(self, assets: list[Asset]) -> None:
        self.symbols: dict[str, tuple[str, bool]] = {}  # upper-case form -> (symbol, ambiguous)
        # lower-case name, words joined by " " -> (symbol, evidence: 0 strong, 2 weak, 3 app; capitalised)
        self.names: dict[str, tuple[str, int, bool]] = {}
        self.multi: dict[str, int] = {}  # first word of a multi-word name -> most words of such names
        for a in assets:
            for form in (a.symbol, *a.former_symbols):
                self.symbols[form] = (a.symbol, a.ambiguous or len(form) == 1)
            weak = {w.casefold() for w in a.weak}
            app = {w.casefold() for w in a.app}
            for name in a.names():
                key = " ".join(tokenize(name).lows)
                if not key:
                    continue
                # An ambiguous symbol that is also the name ("IOTA", "NEO") keeps the symbol's rules.
                if a.ambiguous and name.upper() in (a.symbol, *a.former_symbols) and name.casefold() not in weak:
                    continue
                folded = name.casefold()
                evidence = 2 if folded in weak else 3 if folded in app else 0
                self.names[key] = (a.symbol, evidence, name[:1].isupper())
                if key.endswith("coin") and " " not in key:  # "150 more bitcoins", "dogecoins"
                    self.names.setdefault(key + "s", self.names[key])
                words = key.split(" ")
                if len(words) > 1:
                    self.multi[words[0]] = max(self.multi.get(words[0], 0), len(words))
        self.symbol_set = frozenset(self.symbols)
        self.name_set = frozenset(k for k in self.names if " " not in k) | frozenset(self.multi)
        # Exchange-style pairs written as one word (BTCUSDT): every symbol x quote, looked up like a word.
        self.concat: dict[str, str] = {
            s + q: self.symbols[s][0] for s in self.symbols if len(s) >= 2 for q in _CONCAT_QUOTES
        }
        self.upper_set = self.symbol_set | frozenset(self.concat)

    def find(self, toks: Tokens, extra_context: bool = False, apps: list[Mention] | None = None) -> list[Mention]:
        """Mentions in one text, in order; `extra_context` says a sibling field is about crypto. App names that
        are not their token ("Uniswap goes live") are added to `apps` when given: they still tell the topic."""
        words, lows, kinds = toks.words, toks.lows, toks.kinds
        # Most headlines name no asset: two set intersections (in C) decide that before any Python loop.
        named = self.name_set.intersection(lows)
        upper = self.upper_set.intersection(words)  # symbols and one-word pairs (BTCUSDT)
        cashtags = CASHTAG in kinds
        if not named and not upper and not cashtags:
            return []
        n = len(words)
        # Only the positions that can start a mention are visited.
        if cashtags:
            starts = [i for i in range(n) if lows[i] in named or words[i] in upper or kinds[i] == CASHTAG]
        else:
            starts = [i for i in range(n) if lows[i] in named or words[i] in upper]
        # (symbol, first token, last token + 1, evidence): 0 strong, 1 ambiguous symbol, 2 weak name, 3 app name
        cands: list[tuple[str, int, int, int]] = []
        free = 0  # tokens before this index belong to a multi-word name already found
        for i in starts:
            if i < free:
                continue
            word, low = words[i], lows[i]
            if kinds[i] == CASHTAG:
                hit = self.symbols.get(word.upper())
                if hit:
                    cands.append((hit[0], i, i + 1, 0))
                continue
            longest = self.multi.get(low)
            if longest:
                hit = None
                for size in range(min(longest, n - i), 1, -1):
                    hit = self.names.get(" ".join(lows[i : i + size]))
                    if hit:
                        cands.append((hit[0], i, i + size, hit[1]))
                        free = i + size
                        break
                if hit:
                    continue
            if word in upper and word in self.symbols and word.isupper():
                symbol, ambiguous = self.symbols[word]
                pair = self._pair(toks, i)
                if pair != 2:  # the fiat or stablecoin quote of a pair is not a mention
                    cands.append((symbol, i, i + 1, 0 if pair == 1 or not ambiguous else 1))
            elif low in named:
                hit = self.names.get(low)
                if hit:
                    cands.append((hit[0], i, i + 1, hit[1]))
            elif word in upper:
                cands.append((self.concat[word], i, i + 1, 0))
        if not cands:
            return []
        kept = [c for c in cands if not self._named_after(toks, c[1], c[2])]
        named_after, cands = len(kept) < len(cands), kept  # "Avalanche Ventures": not AVAX, but about crypto

        strong = {c[0] for c in cands if c[3] == 0}
        pending = [c for c in cands if c[3] != 0 and c[0] not in strong]
        if pending:
            context = extra_context or bool(strong) or named_after or not CRYPTO_WORDS.isdisjoint(lows)
            shouting: bool | None = None
            covered = {j for c in cands if c[3] == 0 for j in range(c[1], c[2])}
            for symbol, start, stop, evidence in pending:
                if symbol in strong:
                    ok = True
                elif evidence == 1:
                    if len(words[start]) == 1 or (stop < n and lows[stop] in ACRONYM_AFTER):
                        continue
                    if shouting is None:
                        shouting = self._shouting(toks)
                    if shouting:
                        ok = stop < n and lows[stop] in NOUNS_AFTER
                    else:
                        ok = context or _price_near(toks, start)
                elif evidence == 2:
                    ok = _weak_name_ok(toks, start, stop, covered)
                else:
                    ok = self._app_name_ok(toks, symbol, start, stop, covered)
                    if not ok and apps is not None and self._app_cased(toks, start, stop):
                        apps.append((symbol, start))
                if ok:
                    strong.add(symbol)
                    covered.update(range(start, stop))
                    context = True  # an accepted asset makes the text about crypto for the rest
        return [(c[0], c[1]) for c in cands if c[0] in strong]

    def _named_after(self, toks: Tokens, start: int, stop: int) -> bool:
        """A fund, a technology or a copy named after the asset, not the asset: "Solana Ventures", "Ethereum
        virtual machine", "Ethereum-compatible", "Ethereum clone" (a name, not a symbol)."""
        if stop >= len(toks.lows) or toks.words[start].isupper() or toks.kinds[start] == CASHTAG:
            return False
        nxt = toks.lows[stop]
        return nxt in NAMED_AFTER or (nxt == "compatible" and toks.seps[stop - 1] == "-")

    def _app_name_ok(self, toks: Tokens, symbol: str, start: int, stop: int, covered: set[int]) -> bool:
        words, lows, kinds = toks.words, toks.lows, toks.kinds
        n = len(lows)
        if not self._app_cased(toks, start, stop):
            return False
        if stop < n:
            nxt = lows[stop]
            if nxt in TOKEN_AFTER or self.symbols.get(words[stop], ("",))[0] == symbol:
                return True  # "Uniswap token", "Uniswap (UNI)"
            if nxt in MOVE_WORDS and any(k in (PCT, MONEY) for k in kinds[stop + 1 : stop + 4]):
                return True
        if any(lows[j] in TOKEN_BEFORE for j in range(max(0, start - 2), start)):
            return True
        return _in_list(toks, start, stop, covered)

    def _app_cased(self, toks: Tokens, start: int, stop: int) -> bool:
        """False for an app name registered capitalised but written in lower case ("curve", "compound": a word)."""
        cased = self.names.get(" ".join(toks.lows[start:stop]), ("", 3, False))[2]
        return not (cased and toks.words[start][:1].islower())

    def _pair(self, toks: Tokens, i: int) -> int:
        """1 when token i is the base of a pair, 2 when it is a stable quote of one, else 0."""
        words, seps = toks.words, toks.seps
        if i + 1 < len(words) and seps[i] in ("/", "-"):
            nxt = words[i + 1]
            if nxt in QUOTES:
                return 1
        if i > 0 and seps[i - 1] in ("/", "-"):
            prev = words[i - 1]
            if prev in self.symbol_set:
                return 2 if words[i] in STABLE_QUOTES else 1
        return 0

    def _shouting(self, toks: Tokens) -> bool:
        """Written in capitals for emphasis: two or more capitalised words that are not symbols or acronyms,
        or most words in capitals."""
        caps = total = emphasis = 0
        for word, kind in zip(toks.words, toks.kinds, strict=True):
            if kind != WORD or not word[0].isalpha():
                continue
            total += 1
            if len(word) >= 2 and word.isupper():
                caps += 1
                if len(word) >= 3 and word not in self.symbol_set and word not in ACRONYMS:
                    emphasis += 1
        return emphasis >= 2 or (total >= 4 and caps * 2 >= total)


def _price_near(toks: Tokens, i: int) -> bool:
    lows, kinds = toks.lows, toks.kinds
    for j in range(max(0, i - 3), min(len(lows), i + 4)):
        if j != i and (kinds[j] == PCT or (kinds[j] == WORD and lows[j] in PRICE_WORDS)):
            return True
    return False


def _weak_name_ok(toks: Tokens, start: int, stop: int, covered: set[int]) -> bool:
    lows, kinds, seps = toks.lows, toks.kinds, toks.seps
    n = len(lows)
    if toks.words[start][:1].islower():
        return False  # "wallet maker", "near record highs": a name is capitalised, a word is not
    if stop < n:
        nxt = lows[stop]
        if nxt in NOUNS_AFTER:
            return True
        if seps[stop - 1] == "-" and nxt in HYPHEN_AFTER:
            return True
        if nxt in PRICE_WORDS and any(k in (PCT, MONEY) for k in kinds[stop + 1 : stop + 4]):
            return True
    for j in range(max(0, start - 2), start):
        if lows[j] in NOUNS_BEFORE:
            return True
    if start >= 2 and lows[start - 1] in CARRIED_ON and start - 2 in covered:
        return True
    return _in_list(toks, start, stop, covered)


def _in_list(toks: Tokens, start: int, stop: int, covered: set[int]) -> bool:
    lows, seps = toks.lows, toks.seps
    n = len(lows)
    # In a list with an asset: "Dogecoin, Pepe and Solana", "Uniswap, Curve".
    if start - 1 in covered and seps[start - 1].strip() in (",", "&"):
        return True
    if stop in covered and seps[stop - 1].strip() in (",", "&"):
        return True
    for j, k in ((start - 2, start - 1), (stop + 1, stop)):
        if j in covered and 0 <= k < n and lows[k] in LIST_WORDS:
            return True
    return False
