"""How `ferry admin` lays tables out (ferry.cli.tables) and reads mqadmin's true/false words
after flags (ferry.cli.groups), without a cluster."""

from __future__ import annotations

import typer

from ferry.cli.groups import mqadmin_booleans
from ferry.cli.tables import Free, fitted_widths, plain, records

MSG_ID = "7F00000115302BE89FB085B6A8358B0F"
OFFSET_ID = "7F0000010000975F0000000000000127"
COLUMNS = ["msg id", "offset msg id", "broker", "queue", "keys", "body"]
ROW = [MSG_ID, OFFSET_ID, "broker-a", "3", "k1 k2", Free("hello\nworld, a body " * 3)]


def test_plain_is_one_line_per_record_with_headers_marked() -> None:
    out = plain("2 messages", COLUMNS, [ROW, [*ROW[:4], "", Free("")]]).splitlines()
    assert out[0] == "# 2 messages"
    assert out[1].startswith("#msg id") and "#offset msg id" in out[1]
    assert len(out) == 4  # title, header, one line per record: the body's \n is escaped
    assert out[2].startswith(f"{MSG_ID}  {OFFSET_ID}  broker-a")
    assert "hello\\nworld" in out[2]
    assert out[3].split()[-2:] == ["-", "-"]  # empty values hold their place
    assert out[1].index("#offset") == out[2].index(OFFSET_ID)  # aligned
    assert all(line == line.rstrip() for line in out)


def test_a_boxed_table_is_used_only_when_no_copied_word_would_break() -> None:
    wide = fitted_widths(COLUMNS, [ROW], 250)
    assert wide is not None and wide[0] == len(MSG_ID)
    # narrower: the body gives way first, the ids keep their width
    narrow = fitted_widths(COLUMNS, [ROW], 120)
    assert narrow is not None
    assert narrow[:2] == [len(MSG_ID), len(OFFSET_ID)]
    assert narrow[5] < len("hello world, a body ")
    assert sum(narrow) + 1 + 3 * len(COLUMNS) <= 120
    assert fitted_widths(COLUMNS, [ROW], 60) is None  # two ids cannot share 60 columns


def test_records_keep_values_whole_and_put_long_ones_on_their_own_line() -> None:
    out = records("title", COLUMNS, [ROW], 40).splitlines()
    assert out[0] == "title"
    assert MSG_ID in out  # alone on its line: 'offset msg id' + id would pass 40
    assert OFFSET_ID in out
    assert "broker         broker-a" in out
    body = out[out.index("body") + 1 :]
    assert all(len(line) <= 40 for line in body)  # free text wraps to the width
    pairs = [["Msg ID", MSG_ID], ["Queue", "1"]]
    fields = records("message", ["field", "value"], pairs, 80, fields=True)
    assert fields.splitlines() == ["message", "", f"Msg ID  {MSG_ID}", "Queue   1"]


def test_flags_take_mqadmin_true_and_false_words() -> None:
    app = typer.Typer()

    @app.command()
    def cmd(
        print_body: bool = typer.Option(False, "-d", "--printBody"),
        topic: str = typer.Option("", "-t"),
    ) -> None:
        pass

    command = typer.main.get_command(app)
    assert mqadmin_booleans(command, ["-t", "T", "-d", "true"]) == ["-t", "T", "-d"]
    assert mqadmin_booleans(command, ["-d", "FALSE", "-t", "T"]) == ["-t", "T"]
    assert mqadmin_booleans(command, ["-d", "-t", "true"]) == ["-d", "-t", "true"]  # a value
