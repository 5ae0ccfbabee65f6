"""The spool: rounds fetched and not yet committed to every table, written ahead under the root.

A round is put here whole (one object: a local file renamed into place, or one PUT) before its
first table commit and deleted after its last, so a collector killed at any moment leaves either
nothing of the round (it never reached the spool: it is in no table) or the whole round here,
which the next `collect` on the root commits to every table it is missing from. Commits are
idempotent (`_tables.commit`), so finishing a round twice, or beside a collector that is still
committing it, lands it once.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Iterator, List, Tuple

from .._exceptions import DefiLensWarning, HistoryError
from ._root import Root, require
from ._rounds import Round
from ._tables import one_line

if TYPE_CHECKING:
    from obstore.store import ObjectStore

#: The spool's folder under the root (Delta and other engines skip folders starting with "_").
SPOOL = "_spool"
SUFFIX = ".round"


def key(app_id: str, number: int) -> str:
    return f"{SPOOL}/{app_id}/{number:012d}{SUFFIX}"


class Spool:
    def __init__(self, root: Root) -> None:
        self.root = root
        self._store: "ObjectStore | None" = None

    @property
    def store(self) -> "ObjectStore":
        if self._store is None:
            self._store = self.root.store()
        return self._store

    def put(self, round_: Round) -> str:
        """Writes the round whole under its key, or raises `HistoryError` having written nothing."""
        obstore = require("obstore")
        path = key(round_.app_id, round_.number)
        try:
            obstore.put(self.store, path, round_.to_bytes())
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(
                f"could not write the round to the spool at {self.root.url}/{path}: {one_line(error)}"
            ) from None
        return path

    def drop(self, path: str) -> None:
        obstore = require("obstore")
        try:
            obstore.delete(self.store, path)
        except FileNotFoundError:
            pass  # another process finished the same round
        except Exception as error:  # obstore's errors, OSError
            warnings.warn(
                f"could not delete {path} from the spool ({one_line(error)}): the next collect will find the round "
                "committed and delete it",
                DefiLensWarning,
                stacklevel=2,
            )

    def paths(self) -> List[str]:
        obstore = require("obstore")
        try:
            listed = [meta["path"] for batch in obstore.list(self.store, prefix=SPOOL) for meta in batch]
        except FileNotFoundError:
            return []
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(f"cannot list the spool at {self.root.url}/{SPOOL}: {one_line(error)}") from None
        return sorted(path for path in listed if path.endswith(SUFFIX))

    def pending(self) -> Iterator[Tuple[str, Round]]:
        """Every spooled round, oldest first by collector and number. A file that is not a round
        (foreign, or damaged by a crash of the machine) is skipped with a warning and left in place."""
        obstore = require("obstore")
        for path in self.paths():
            try:
                data = bytes(obstore.get(self.store, path).bytes())
            except FileNotFoundError:
                continue  # finished by another process meanwhile
            except Exception as error:  # obstore's errors, OSError
                raise HistoryError(f"cannot read {path} from the spool: {one_line(error)}") from None
            try:
                yield path, Round.from_bytes(data)
            except ValueError as error:
                warnings.warn(
                    f"{self.root.url}/{path} is not a round defilens can read ({error}); it was left in place and "
                    "skipped: delete it if nothing of yours wrote it",
                    DefiLensWarning,
                    stacklevel=2,
                )
