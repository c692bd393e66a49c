"""Config files are written atomically with a .bak, and the .bak is read when the file is bad."""

import json

from ferrymq.broker.consumer_offset_manager import ConsumerOffsetManager
from ferrymq.common.json_config_file import JsonConfigFile


def test_write_keeps_previous_content_in_bak(tmp_path):
    f = JsonConfigFile(tmp_path / "topics.json")
    f.write_blocking('{"v":1}')
    f.write_blocking('{"v":2}')
    assert json.loads((tmp_path / "topics.json").read_text()) == {"v": 2}
    assert json.loads((tmp_path / "topics.json.bak").read_text()) == {"v": 1}
    assert not (tmp_path / "topics.json.tmp").exists()


def test_corrupt_file_falls_back_to_bak(tmp_path):
    f = JsonConfigFile(tmp_path / "x.json")
    f.write_blocking('{"v":1}')
    f.write_blocking('{"v":2}')
    (tmp_path / "x.json").write_text('{"v":')
    assert f.load() == {"v": 1}


async def test_consumer_offsets_persist_in_fastjson_form_and_reload(tmp_path):
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("g", "T", 0, 12)
    offsets.commit("g", "T", 3, 7)
    await offsets.persist()
    assert '"T@g":{0:12,3:7}' in (tmp_path / "consumerOffset.json").read_text()
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query("g", "T", 3) == 7 and again.query("g", "T", 1) == -1
