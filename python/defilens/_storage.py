"""Where frames and histories live: a local folder, or object storage (``s3://bucket/prefix``,
and the other URLs polars' cloud support reads) given with polars-style ``storage_options``.

Local writes go to a temporary file that is renamed; an object is created whole by its upload
(S3 makes an object visible only when its PUT or multipart upload completes), so neither ever
leaves a partial file under its final name. Listing and deleting objects needs fsspec with the
store's driver (``pip install "defilens[cloud]"`` for S3: s3fs).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import polars as pl

PathLike = Union[str, "os.PathLike[str]"]
StorageOptions = Optional[Mapping[str, Any]]

#: polars' (object_store's) S3 option names -> s3fs's.
_S3FS_OPTIONS = {
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_session_token": "token",
    "aws_endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "endpoint_url": "endpoint_url",
}


def is_remote(path: PathLike) -> bool:
    return "://" in os.fspath(path) and not os.fspath(path).startswith("file://")


class Remote:
    """A prefix in object storage, with the fsspec filesystem that lists and deletes there."""

    def __init__(self, url: str, storage_options: StorageOptions) -> None:
        self.url = url.rstrip("/")
        self.protocol = self.url.split("://", 1)[0]
        self.storage_options: Dict[str, Any] = dict(storage_options or {})
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError:
            raise ImportError(
                f'{self.protocol}:// paths need fsspec and its {self.protocol} driver: pip install "defilens[cloud]"'
            ) from None
        try:
            self.fs = fsspec.filesystem(self.protocol, **self._fsspec_options())
        except (ImportError, ValueError) as error:
            raise ImportError(
                f"{self.protocol}:// paths need fsspec's {self.protocol} driver (s3fs for s3://): "
                f'pip install "defilens[cloud]" ({error})'
            ) from None

    def _fsspec_options(self) -> Dict[str, Any]:
        if self.protocol not in ("s3", "s3a"):
            return dict(self.storage_options)
        options: Dict[str, Any] = {}
        client: Dict[str, Any] = {}
        for key, value in self.storage_options.items():
            if key in _S3FS_OPTIONS:
                options[_S3FS_OPTIONS[key]] = value
            elif key in ("aws_region", "region"):
                client["region_name"] = value
            elif key in ("aws_allow_http", "allow_http"):
                continue  # s3fs takes http from the endpoint URL
            else:
                options[key] = value
        if client:
            options["client_kwargs"] = client
        return options

    def join(self, *parts: str) -> str:
        return "/".join([self.url, *parts])

    def _bare(self, url: str) -> str:
        return url.split("://", 1)[1]

    def exists(self, url: str) -> bool:
        return bool(self.fs.exists(self._bare(url)))

    def is_dir(self, url: str) -> bool:
        return bool(self.fs.isdir(self._bare(url)))

    def folders(self, url: str) -> List[str]:
        """Names of the folders directly under ``url``."""
        if not self.is_dir(url):
            return []
        entries = self.fs.ls(self._bare(url), detail=True, refresh=True)
        return sorted(entry["name"].rstrip("/").rsplit("/", 1)[-1] for entry in entries if entry["type"] == "directory")

    def files(self, url: str, suffix: str = ".parquet") -> List[str]:
        """URLs of the files directly under ``url`` ending with ``suffix``."""
        if not self.is_dir(url):
            return []
        entries = self.fs.ls(self._bare(url), detail=True, refresh=True)
        return sorted(
            f"{self.protocol}://{entry['name']}"
            for entry in entries
            if entry["type"] == "file" and entry["name"].endswith(suffix)
        )

    def remove(self, urls: List[str]) -> None:
        if urls:
            self.fs.rm([self._bare(url) for url in urls])

    def write(self, frame: pl.DataFrame, url: str, file_format: str, metadata: Optional[Dict[str, str]] = None) -> None:
        """Uploads ``frame``; the object appears whole when the upload completes, or not at all."""
        buffer = io.BytesIO()
        if file_format == "parquet":
            frame.write_parquet(buffer, metadata=metadata)
        elif file_format == "csv":
            frame.write_csv(buffer)
        elif file_format == "ndjson":
            frame.write_ndjson(buffer)
        else:
            raise ValueError(f"format must be 'parquet', 'csv' or 'ndjson', got {file_format!r}")
        self.fs.pipe_file(self._bare(url), buffer.getvalue())

    def read(self, url: str) -> pl.DataFrame:
        return pl.read_parquet(url, storage_options=self.storage_options)

    def metadata(self, url: str) -> Dict[str, str]:
        return dict(pl.read_parquet_metadata(url, storage_options=self.storage_options))


def location(path: PathLike, storage_options: StorageOptions) -> "Union[Path, Remote]":
    """A local folder as a `Path`, or a `Remote` for a URL."""
    if is_remote(path):
        return Remote(os.fspath(path), storage_options)
    if storage_options:
        raise ValueError("storage_options apply to object storage URLs such as s3://bucket/prefix, not to local paths")
    return Path(path)
