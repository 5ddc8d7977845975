"""Key administration (the admin key only): create (the key is shown once), list, read, change,
rotate (a new secret, the old one accepted for an overlap window), revoke."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import ValidationError
from starlette.responses import Response

from app.api.access import AdminDep
from app.api.deps import AuthDep, GatewayDep
from app.api.json_body import JSONBodyRoute
from app.api.key_schemas import KeyCreate, KeyCreated, KeyList, KeyOut, KeyPatch, KeyRotate
from app.api.responses import JSON
from app.api.schemas import ErrorBody
from app.auth import Auth
from app.auth.keystore import KeyStore
from app.auth.policy import KeyFields
from app.core.errors import RequestError

router = APIRouter(tags=["admin"], route_class=JSONBodyRoute)

_ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (401, 403, 404, 409, 422, 503)}
KeyId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.-]{1,32}$")]


def _keystore(auth: Auth) -> KeyStore:
    if auth.keystore is None:
        raise RequestError("keys made over HTTP live in the records database, which is off here "
                           "(FOUNDRY_RECORDS=off): list keys in configuration instead", code="keys_need_records",
                           status=409)
    return auth.keystore


def _configured(auth: Auth, key_id: str) -> KeyOut | None:
    policy = auth.configured(key_id)
    return KeyOut.of(policy) if policy is not None else None


def _missing(key_id: str) -> RequestError:
    return RequestError(f"no key {key_id!r}", code="key_not_found", status=404, field="key_id")


@router.post("/v1/admin/keys", status_code=201, response_model=KeyCreated, responses=_ERRORS,
             summary="Create a key (the answer carries the key, this once)")
async def create_key(body: KeyCreate, _admin: AdminDep, auth: AuthDep) -> Response:
    row, key = await _keystore(auth).create(body)
    return JSON(KeyCreated(**KeyOut.of(row.policy, row).model_dump(), key=key).model_dump(mode="json"),
                status_code=201, headers={"Cache-Control": "no-store"})


@router.get("/v1/admin/keys", response_model=KeyList, responses=_ERRORS, summary="Every key, without secrets")
async def list_keys(_admin: AdminDep, auth: AuthDep) -> Response:
    data = [KeyOut.of(p) for p in auth.configured_keys()]
    if auth.keystore is not None:
        data += [KeyOut.of(row.policy, row) for row in await auth.keystore.list()]
    return JSON(KeyList(data=data).model_dump(mode="json"))


@router.get("/v1/admin/keys/{key_id}", response_model=KeyOut, responses=_ERRORS, summary="One key")
async def get_key(key_id: KeyId, _admin: AdminDep, auth: AuthDep) -> Response:
    configured = _configured(auth, key_id)
    if configured is not None:
        return JSON(configured.model_dump(mode="json"))
    row = await _keystore(auth).get(key_id)
    if row is None:
        raise _missing(key_id)
    return JSON(KeyOut.of(row.policy, row).model_dump(mode="json"))


@router.patch("/v1/admin/keys/{key_id}", response_model=KeyOut, responses=_ERRORS,
              summary="Change a key's name or policy (every replica within FOUNDRY_KEY_CACHE_SECONDS)")
async def patch_key(key_id: KeyId, body: KeyPatch, _admin: AdminDep, auth: AuthDep) -> Response:
    if _configured(auth, key_id) is not None:
        raise RequestError(f"key {key_id!r} is in configuration: change it there", code="key_in_config",
                           status=409, field="key_id")
    store = _keystore(auth)
    row = await store.get(key_id)
    if row is None or row.revoked_at is not None:
        raise _missing(key_id)
    current = KeyOut.of(row.policy, row).model_dump(include=set(KeyFields.model_fields))
    changes = body.model_dump(exclude_unset=True)
    if changes.get("name", "") is None:
        raise RequestError("name: a key keeps a name", code="invalid_request", status=422, field="name")
    try:
        fields = KeyFields.model_validate({**current, **changes})
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "body"
        raise RequestError(f"{field}: {error['msg']}", code="invalid_request", status=422, field=field) from None
    updated = await store.update(key_id, fields)
    if updated is None:
        raise _missing(key_id)
    auth.forget()
    return JSON(KeyOut.of(updated.policy, updated).model_dump(mode="json"))


@router.delete("/v1/admin/keys/{key_id}", status_code=204, responses=_ERRORS,
               summary="Revoke a key (refused by every replica within FOUNDRY_KEY_CACHE_SECONDS; its running streams end "
                       "with final error key_revoked)")
async def revoke_key(key_id: KeyId, _admin: AdminDep, auth: AuthDep, gateway: GatewayDep) -> Response:
    if _configured(auth, key_id) is not None:
        raise RequestError(f"key {key_id!r} is in configuration: remove it there", code="key_in_config",
                           status=409, field="key_id")
    store = _keystore(auth)
    if not await store.revoke(key_id):
        row = await store.get(key_id)
        if row is None or row.revoked_at is None:
            raise _missing(key_id)
        raise RequestError(f"key {key_id!r} was already revoked at {row.revoked_at.isoformat()}",
                           code="already_revoked", status=409, field="key_id")
    auth.forget()
    gateway.runs.end_of(key_id)  # other replicas: app/main.py _revocations
    return Response(status_code=204)


@router.post("/v1/admin/keys/{key_id}/rotate", response_model=KeyCreated, responses=_ERRORS,
             summary="Rotate a key: a new secret (shown this once); the current one works for overlap_seconds more")
async def rotate_key(key_id: KeyId, _admin: AdminDep, auth: AuthDep, body: KeyRotate | None = None) -> Response:
    if _configured(auth, key_id) is not None:
        raise RequestError(f"key {key_id!r} is in configuration: rotate it there (a new hash, then remove the "
                           "old entry)", code="key_in_config", status=409, field="key_id")
    rotated = await _keystore(auth).rotate(key_id, (body or KeyRotate()).overlap_seconds)
    if rotated is None:
        raise _missing(key_id)
    row, key = rotated
    auth.forget()
    return JSON(KeyCreated(**KeyOut.of(row.policy, row).model_dump(), key=key).model_dump(mode="json"),
                headers={"Cache-Control": "no-store"})
