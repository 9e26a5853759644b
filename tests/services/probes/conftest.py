import pytest

from services.executors.local import LocalExecutor
from services.settings import Settings


@pytest.fixture
def executor() -> LocalExecutor:
    return LocalExecutor(Settings())
