"""The bodies of /v1/blobs/uploads: a resumable upload of one whole file (docs/uploads.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.core.digest import DIGEST_PATTERN
from app.schemas.wire import BlobInfo


class UploadStart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    digest: str = Field(pattern=DIGEST_PATTERN, description="sha256 of the whole file's bytes")
    bytes: int = Field(ge=0, description="the file's size")


class Upload(BaseModel):
    id: str = Field(description="the upload's id; empty when the file is stored already")
    digest: str
    bytes: int
    received: int = Field(description="bytes stored so far: the next part starts here")
    part_bytes: int = Field(description="the most one part may hold")
    stored: bool = Field(description="the file is stored (finished, or it was there already)")
    blob: BlobInfo | None = Field(None, description="the stored file, once finished")
