"""Units the numbers people read are stated in: one definition each.

MB is 2**20 bytes, as SAPP's payload builder divides and as `nvidia-smi` reports MiB; device
memory in the catalog and every `_mb` figure use it. GiB is 2**30 bytes. Times the balancer writes
in its descriptions' unit into a note (`TimedNote`) are said in seconds where that unit is known.
"""

from __future__ import annotations

from typing import Any

MB = 2**20
GIB = 2**30


def mb_words(value_mb: float) -> str:
    """A memory figure as a person reads it: thousands separated, whole MB (`9,991 MB`), three
    significant figures below 10 MB (a toy device's `4.5 MB`), never a bare float's `9991.0`."""
    return f"{value_mb:,.0f} MB" if abs(value_mb) >= 10 else f"{value_mb:.3g} MB"


def counted(count: int, word: str, words: str | None = None) -> str:
    """A count with its noun in the number it takes: `1 stage`, `2 stages`, `0 stages` (*words*: the
    plural when it is not *word* + "s"); thousands separated."""
    return f"{count:,} {word if count == 1 else (words or word + 's')}"


def percent_words(fraction: float) -> str:
    """A fraction as a person reads it: a percentage to two decimals, no space before the sign (`3.35%`);
    one above 0 that rounds to nothing is `<0.01%`, so a gap left open never reads as closed."""
    if 0 < fraction < 0.00005:
        return "<0.01%"
    return f"{100 * fraction:.2f}%"


class TimedNote(str):
    """A solver note (a plain string, its times in the balancer's descriptions' unit, `choice_model.time_unit`)
    that can say its times in seconds: `template` holds one `{}` per time of `times`. A run config's result
    (`estimate.seconds.in_seconds`) says them in seconds ("bound 2.0551 s"), a layers.json's in the file's unit
    ("bound 466.17"), as every note did until session 30, in the JSON of a run config too."""

    template: str
    times: tuple[float, ...]

    def __new__(cls, template: str, *times: float) -> TimedNote:
        note = super().__new__(cls, template.format(*(f"{t:.6g}" for t in times)))
        note.template = template
        note.times = tuple(float(t) for t in times)
        return note

    def __reduce__(self) -> tuple[Any, ...]:
        # a search balances in worker processes: the note crosses as its template and times
        return (TimedNote, (self.template, *self.times))

    def after(self, separator: str) -> TimedNote:
        """The note from the first *separator* on (its words before it hold no time)."""
        head, found, tail = self.template.partition(separator)
        assert found and "{}" not in head, (self.template, separator)
        return TimedNote(tail, *self.times)

    def seconds(self, unit_s: float) -> str:
        """The note with its times in seconds, the unit being *unit_s* seconds."""
        return self.template.format(*(f"{t * unit_s:,.4f} s" for t in self.times))


def note_in_seconds(note: Any, unit_s: float) -> Any:
    """A note with its times in seconds where it has any (`TimedNote`); any other as it is."""
    return note.seconds(unit_s) if isinstance(note, TimedNote) else note
