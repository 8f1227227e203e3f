import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def unwritable_folder(tmp_path: Path) -> Path:
    """An existing folder this process may not write into: a read-only one, or for root
    (who writes into those) the process's own folder under /proc."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path(f"/proc/{os.getpid()}")
    assert folder.is_dir() and not os.access(folder, os.W_OK)
    return folder
