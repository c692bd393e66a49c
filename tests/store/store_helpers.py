"""Shared by the store tests: small segment sizes so rolling happens, and a message maker."""

from __future__ import annotations

from ferrymq.common.message import MessageExt
from ferrymq.store import StoreConfig

STORE_HOST = ("10.0.0.1", 10911)
SMALL_COMMIT_LOG = 64 * 1024  # rolls after a few dozen KiB of records
SMALL_CONSUME_QUEUE = 20 * 100  # 100 entries per file
SMALL_HASH_SLOTS = 101  # IndexFiles of about 20 KiB instead of 420 MB (sparse, but copies fill them in)
SMALL_INDEX_NUM = 1000


def small_config(root, **overrides) -> StoreConfig:
    settings = dict(mapped_file_size_commit_log=SMALL_COMMIT_LOG, mapped_file_size_consume_queue=SMALL_CONSUME_QUEUE,
                    max_hash_slot_num=SMALL_HASH_SLOTS, max_index_num=SMALL_INDEX_NUM)
    settings.update(overrides)
    return StoreConfig(str(root), **settings)


def make_msg(topic: str = "TopicTest", queue_id: int = 0, body: bytes = b"hello", tags: str | None = "TagA", **props) -> MessageExt:
    properties = dict(props)
    if tags:
        properties["TAGS"] = tags
    return MessageExt(
        topic, body, properties=properties, queue_id=queue_id, born_timestamp=1_700_000_000_000,
        born_host=("192.168.1.10", 50000),
    )  # fmt: skip
