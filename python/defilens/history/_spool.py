"""The spool: rounds fetched and not yet committed to every table, written ahead under the root.

A round is put here whole (one object: a local file renamed into place, or one PUT) before its
first table commit and deleted after its last, so a collector killed at any moment leaves either
nothing of the round (it never reached the spool: it is in no table) or the whole round here,
which the next `collect` on the root commits to every table it is missing from. Commits are
idempotent (`_tables.commit`), so finishing a round twice, or beside a collector that is still
committing it, lands it once.
"""

from __future__ import annotations

import uuid
import warnings
from typing import TYPE_CHECKING, Iterator, List, Tuple

from .._core import empty_frames
from .._exceptions import DefiLensWarning, HistoryError
from .._frames import BODIES_SCHEMA
from .._stack import stacklevel_outside
from .._storage import Root, one_line, require
from ._layout import SET_ASIDE, SPOOL
from ._rounds import Round

if TYPE_CHECKING:
    from obstore.store import ObjectStore

SUFFIX = ".round"


def key(round_: Round) -> str:
    """Where a round waits: by collector and number, and its uid, so that two rounds given one
    number (two collectors that used one id) never overwrite each other."""
    uid = "" if round_.uid is None else f".{round_.uid}"
    return f"{SPOOL}/{round_.app_id}/{round_.number:012d}{uid}{SUFFIX}"


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
        path = key(round_)
        try:
            obstore.put(self.store, path, round_.to_bytes())
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(
                f"could not write the round to the spool at {self.root.url}/{path}: {one_line(error)}"
            ) from None
        return path

    def holds(self, path: str) -> bool:
        """Whether the entry at ``path`` is still in the spool (a process may have finished it)."""
        try:
            require("obstore").head(self.store, path)
        except FileNotFoundError:
            return False
        except Exception:  # obstore's errors, OSError: unknown, said to be there
            return True
        return True

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
                stacklevel=stacklevel_outside(),
            )

    def paths(self) -> List[str]:
        obstore = require("obstore")
        try:
            listed = [meta["path"] for batch in obstore.list(self.store, prefix=SPOOL) for meta in batch]
        except FileNotFoundError:
            return []
        except Exception as error:  # obstore's errors, OSError
            raise HistoryError(f"cannot list the spool at {self.root.url}/{SPOOL}: {one_line(error)}") from None
        return sorted(path for path in listed if path.endswith(SUFFIX) and not path.startswith(f"{SET_ASIDE}/"))

    def pending(self) -> Iterator[Tuple[str, Round]]:
        """Every spooled round, oldest first by collector and number. An entry that is not a round
        this version can commit (bad bytes, cut short by a crash of the machine, another version's
        columns) is set aside under ``_spool/set_aside/`` with one warning, and skipped."""
        obstore = require("obstore")
        for path in self.paths():
            try:
                data = bytes(obstore.get(self.store, path).bytes())
            except FileNotFoundError:
                continue  # finished by another process meanwhile
            except Exception as error:  # obstore's errors, OSError
                raise HistoryError(f"cannot read {path} from the spool: {one_line(error)}") from None
            try:
                round_ = Round.from_bytes(data)
                check_columns(round_)
            except ValueError as error:
                self.set_aside(path, str(error))
                continue
            yield path, round_

    def set_aside(self, path: str, why: str) -> None:
        """Moves an entry that cannot be committed out of the spool, its name kept, and says where."""
        obstore = require("obstore")
        target = f"{SET_ASIDE}/{path[len(SPOOL) + 1 :]}"
        try:
            try:
                obstore.head(self.store, target)
                # One of that name was set aside before (a spool copied from another root?): keep both.
                target = f"{target[: -len(SUFFIX)]}.{uuid.uuid4().hex[:8]}{SUFFIX}"
            except FileNotFoundError:
                pass
            # Not rename-if-absent: S3 has no copy-if-not-exists. Two processes setting the same
            # entry aside write the same bytes under the same name.
            obstore.rename(self.store, path, target)
        except FileNotFoundError:
            return  # another process set it aside (and said so) meanwhile
        except Exception as error:  # obstore's errors, OSError
            warnings.warn(
                f"{self.root.url}/{path} is not a round this defilens can commit ({why}) and could not be set aside "
                f"({one_line(error)}); skipped: move it out of {self.root.url}/{SPOOL}",
                DefiLensWarning,
                stacklevel=stacklevel_outside(),
            )
            return
        warnings.warn(
            f"{self.root.url}/{path} is not a round this defilens can commit ({why}): set aside as "
            f"{self.root.url}/{target}",
            DefiLensWarning,
            stacklevel=stacklevel_outside(),
        )


def check_columns(round_: Round) -> None:
    """A round's bodies and log must have the columns (and types) of this version's: a round
    spooled by another version is refused here, before any table has it."""
    expected = {"bodies": dict(BODIES_SCHEMA), "log": dict(empty_frames()["log"].schema)}
    for part, frame in (("bodies", round_.bodies), ("log", round_.log)):
        found = dict(frame.schema)
        if found != expected[part]:
            missing = [name for name in expected[part] if name not in found]
            extra = [name for name in found if name not in expected[part]]
            other = [name for name in found if name in expected[part] and found[name] != expected[part][name]]
            details = "; ".join(
                text
                for text in (
                    f"without {', '.join(missing[:5])}" if missing else "",
                    f"with {', '.join(extra[:5])}" if extra else "",
                    f"other types of {', '.join(other[:5])}" if other else "",
                )
                if text
            )
            raise ValueError(f"its {part} have other columns than this version's: {details}")
