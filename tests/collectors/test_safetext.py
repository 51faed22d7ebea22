"""collectors.safetext.visible: every control and format character comes out as a printable
escape, printable text comes out as it went in (the same object), and the escapes are the
ones a user would write for those bytes."""

from __future__ import annotations

import random
import sys
import unicodedata

import pytest

from collectors.safetext import table_cell, unsafe_in, visible

# The categories a terminal or a reader could be fooled by (safetext's docstring says why).
UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def expected_escape(cp: int) -> str:
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(cp) or (
        f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}")


def is_safe(text: str) -> bool:
    return all(unicodedata.category(ch) not in UNSAFE_CATEGORIES for ch in text)


@pytest.mark.parametrize("cp", range(0xA0))
def test_every_code_point_up_to_c1_is_itself_or_its_escape(cp: int) -> None:
    ch = chr(cp)
    out = visible(ch)
    if 0x20 <= cp < 0x7F:
        assert out == ch
    else:
        assert out == expected_escape(cp)
        assert out.isascii() and out.isprintable()
        # The same inside text, on either side of it.
        assert visible(f"a{ch}b") == f"a{expected_escape(cp)}b"


def test_every_control_and_format_character_of_unicode_is_escaped() -> None:
    missed = [hex(cp) for cp in range(sys.maxunicode + 1)
              if unicodedata.category(chr(cp)) in UNSAFE_CATEGORIES and not unsafe_in(chr(cp))]
    assert not missed, f"not escaped (unicodedata {unicodedata.unidata_version}): {missed}"


def test_the_spoofing_controls_by_name() -> None:
    for cp in [*range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
               0xFEFF, 0x2028, 0x2029, 0x00AD, 0x061C]:
        assert visible(chr(cp)) == expected_escape(cp), hex(cp)
    # A name that would read "evil.txt" backwards, and one padded with zero-width spaces.
    assert visible("gpu-\u202etxt.exe") == "gpu-\\u202etxt.exe"
    assert visible("node\u200b1") == "node\\u200b1"


def test_printable_text_is_returned_as_it_is() -> None:
    for text in ("", "gpu-node-7", "10.0.0.7:9400", "a" * 100_000,
                 "HBM · 119.043 GB – 4× B200 µs ²", "ノード 🚀 Ünïcödé", "a\xa0b",
                 "private \ue000 use", "C:\\path\\x1b not an escape"):
        assert visible(text) is text, text


def test_osc_csi_dcs_and_their_8_bit_forms() -> None:
    cases = {
        "\x1b]0;pwned\x07": "\\x1b]0;pwned\\x07",  # OSC: set the window title, BEL-ended
        "\x1b]0;pwned\x1b\\": "\\x1b]0;pwned\\x1b\\",  # the same, ST-ended
        "\x1b[2J\x1b[H": "\\x1b[2J\\x1b[H",  # CSI: clear the screen, cursor home
        "\x1b[31mred\x1b[0m": "\\x1b[31mred\\x1b[0m",
        "\x9b31m": "\\x9b31m",  # 8-bit CSI
        "\x9d0;pwned\x9c": "\\x9d0;pwned\\x9c",  # 8-bit OSC ... ST
        "\x1b]8;;http://x/\x07link\x1b]8;;\x07": "\\x1b]8;;http://x/\\x07link\\x1b]8;;\\x07",
        "\x1bP+q544e\x1b\\": "\\x1bP+q544e\\x1b\\",  # DCS: a terminal query
        "\x1b]52;c;cHduZWQ=\x07": "\\x1b]52;c;cHduZWQ=\\x07",  # OSC 52: write the clipboard
    }
    for raw, shown in cases.items():
        assert visible(raw) == shown
        assert "\x1b" not in visible(raw) and is_safe(visible(raw))


def test_keep_leaves_only_what_it_names() -> None:
    assert visible("a\nb\tc\x1b", keep="\n") == "a\nb\\tc\\x1b"
    assert visible("a\nb\tc\r", keep="\n\t") == "a\nb\tc\\r"
    assert visible("x]y", keep="]") == "x]y"  # a regex metacharacter in keep is no trouble
    assert visible("\x1b", keep="\n") == "\\x1b"


def test_non_bmp_and_surrogates_and_bytes() -> None:
    assert visible("\U000e0041\U000e0001tag") == "\\U000e0041\\U000e0001tag"
    assert visible("🚀\U0001d173") == "🚀\\U0001d173"
    # A byte that was not UTF-8, decoded with surrogateescape: shown as the byte.
    assert visible(b"caf\xe9".decode("utf-8", "surrogateescape")) == "caf\\xe9"
    assert visible("\ud800 lone") == "\\ud800 lone"
    assert visible(b"caf\xe9\x1b[2J") == "caf\\xe9\\x1b[2J"
    assert visible(bytearray(b"\x9b")) == "\\x9b"
    for text in ("\udce9", "\ud800", "\udfff"):
        visible(text).encode("utf-8")  # writable: no UnicodeEncodeError at the terminal


def test_other_objects_are_shown_by_their_str() -> None:
    assert visible(None) == "None" and visible(42) == "42"
    assert visible(ValueError("bad \x1b[2J")) == "bad \\x1b[2J"


def test_long_strings() -> None:
    text = "x" * 1_000_000 + "\x1b]0;t\x07"
    out = visible(text)
    assert out == "x" * 1_000_000 + "\\x1b]0;t\\x07"
    every = "".join(chr(cp) for cp in range(0x100)) * 1000
    # 29 C0 as \xNN, \t \n \r, 95 printable ASCII, DEL and C1 (33), 95 of Latin-1, SHY.
    assert is_safe(visible(every))
    assert len(visible(every)) == (29 * 4 + 3 * 2 + 95 + 33 * 4 + 95 + 4) * 1000


def test_random_text_always_comes_out_safe_and_is_stable() -> None:
    rng = random.Random(7)
    pools = [range(0x00, 0x100), range(0x2000, 0x2070), range(0xD7F0, 0xE010),
             range(0xE0000, 0xE0080), range(0x1F600, 0x1F610)]
    for _ in range(2000):
        text = "".join(chr(rng.choice(rng.choice(pools))) for _ in range(rng.randint(0, 40)))
        out = visible(text)
        assert is_safe(out), ascii(text)
        assert visible(out) == out  # nothing left to escape: shown twice, shown the same


def test_a_markdown_cell_stays_one_cell() -> None:
    assert table_cell("a|b\nc\x1b") == "a\\|b\\nc\\x1b"
    row = "| " + " | ".join(table_cell(c) for c in ("n|ode\r\n| x |", "ok")) + " |"
    assert row.count("\n") == 0
    # Only the separators are unescaped pipes.
    assert [i for i, ch in enumerate(row) if ch == "|" and row[i - 1:i] != "\\"] == \
        [0, row.index(" | ok") + 1, len(row) - 1]
    assert table_cell(3.5) == "3.5"
