"""RocketMQ 4.x plain ACL: signed requests and per-account permissions (plain_acl.yml)."""
