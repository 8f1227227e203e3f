"""The one error type for bad input: it names the file, the place in it and what was expected."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (a spec file, a command-line value, an invalid tree structure)."""

    def __init__(self, message: str, source: str | None = None, where: str | None = None):
        self.message = message
        self.source = source
        self.where = where
        super().__init__(self.render())

    def render(self) -> str:
        place = ", ".join(p for p in (self.source, self.where) if p)
        return f"{place}: {self.message}" if place else self.message

    def located(self, source: str | None = None, where: str | None = None) -> InputError:
        """The same error with a file and place filled in where they were missing."""
        return InputError(self.message, self.source or source, self.where or where)

    def about(self, flag: str) -> InputError:
        """The same error placed at a command-line flag when it names no file or place: it
        is about the value given there (an unknown name, a missing file)."""
        return self if self.source or self.where else self.located(where=flag)
