"""plain_acl.yml texts for tests: an admin account and one application account limited to the
topics and groups it is granted (the file format FerryMQ and Apache RocketMQ both read)."""

from __future__ import annotations

from ferrymq.acl.signature import Credentials

__all__ = ["admin_and_app"]


def admin_and_app(admin: Credentials, app: Credentials, topic_perms: list[str], group_perms: list[str]) -> str:
    """``admin`` may do anything; ``app`` only what ``topic_perms`` / ``group_perms`` grant
    (entries such as ``"Orders=PUB|SUB"``), everything else denied."""
    return (
        "accounts:\n"
        f"  - accessKey: {admin.access_key}\n"
        f"    secretKey: {admin.secret_key}\n"
        "    admin: true\n"
        f"  - accessKey: {app.access_key}\n"
        f"    secretKey: {app.secret_key}\n"
        "    defaultTopicPerm: DENY\n"
        "    defaultGroupPerm: DENY\n"
        f"    topicPerms: [{', '.join(topic_perms)}]\n"
        f"    groupPerms: [{', '.join(group_perms)}]\n"
    )
