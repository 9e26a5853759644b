"""Dashboard accounts: local users with scrypt-hashed passwords, and who may see which project.

Hashing uses the standard library's scrypt (memory-hard, salted per user) so that the
domain layer needs neither werkzeug nor a native extension.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from sqlalchemy import Select, bindparam, exists, or_, select
from sqlalchemy.orm import Session

from services.errors import BadInput, NotFound, SignInFailed
from services.jobs.lifecycle import get_or_create_project
from services.models import Project, ProjectMember, User, utcnow

# n=2**14, r=8: 16 MiB and roughly 50 ms per check; slow enough against guessing, quick
# enough for a sign-in. The parameters are stored in the hash so they can be raised later.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MIN_PASSWORD_LENGTH = 8


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32, maxmem=64 * 1024 * 1024
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def check_password(stored: str, password: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    computed = hashlib.scrypt(
        password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=32, maxmem=64 * 1024 * 1024
    )
    return hmac.compare_digest(computed, base64.b64decode(digest))


# Compared against when the user does not exist, so that a wrong name takes as long as a
# wrong password and sign-in timing does not reveal which usernames exist.
_DUMMY_HASH = hash_password(secrets.token_hex(8))


def create_user(session: Session, username: str, password: str, *, projects: list[str], admin: bool = False) -> User:
    username = username.strip()
    if not username:
        raise BadInput("username: must not be empty")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise BadInput(f"password: at least {MIN_PASSWORD_LENGTH} characters")
    if session.scalar(select(User).where(User.username == username)):
        raise BadInput(f"username: {username!r} exists already")
    user = User(
        username=username,
        password_hash=hash_password(password),
        is_admin=admin,
        projects=[get_or_create_project(session, name) for name in dict.fromkeys(projects)],
    )
    session.add(user)
    session.flush()
    return user


def sign_in(session: Session, username: str, password: str) -> User:
    user = session.scalar(select(User).where(User.username == username.strip()))
    if not check_password(user.password_hash if user else _DUMMY_HASH, password) or user is None:
        raise SignInFailed("unknown user or wrong password")
    user.last_sign_in_at = utcnow()
    return user


def end_sessions(user: User) -> None:
    """Sign ``user`` out everywhere: sessions issued before carry an older epoch."""
    user.session_epoch = (user.session_epoch or 0) + 1


def session_is_current(user: User, epoch: object) -> bool:
    return isinstance(epoch, int) and epoch == (user.session_epoch or 0)


def visible_projects(session: Session, user: User) -> list[Project]:
    if user.is_admin:
        return list(session.scalars(select(Project).order_by(Project.name)))
    return list(user.projects)


@functools.cache
def _user_with_projects() -> Select:
    # Built once a process: building the statement and its cache key (the join's
    # EXISTS) cost more Python than executing it, on every dashboard request.
    member = exists().where(ProjectMember.user_id == User.id, ProjectMember.project_id == Project.id)
    return (
        select(User, Project)
        .outerjoin(Project, or_(User.is_admin, member))
        .where(User.id == bindparam("user_id"))
        .order_by(Project.name)
    )


def user_with_projects(session: Session, user_id: int) -> tuple[User | None, list[Project]]:
    """The user and the projects they may see (visible_projects: every project for an
    admin, their memberships otherwise, by name) in one query: every dashboard request
    reads both, and each query costs a page more than its few rows."""
    rows = session.execute(_user_with_projects(), {"user_id": user_id}).all()
    if not rows:
        return None, []
    return rows[0][0], [project for _, project in rows if project is not None]


def require_project(session: Session, user: User, project_id: int) -> Project:
    """The project if the user may see it; otherwise NotFound (no hint that it exists)."""
    project = session.get(Project, project_id)
    if project is None or not (user.is_admin or project in user.projects):
        raise NotFound(f"project {project_id} does not exist or is not yours")
    return project


def list_users(session: Session) -> list[User]:
    """Every dashboard account by name, its projects loaded."""
    return list(session.scalars(select(User).order_by(User.username)).unique())
