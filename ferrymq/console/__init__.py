"""The FerryMQ console: a web UI and its JSON API over the admin client (issue 15).

``ferrymq console`` serves both from one aiohttp application: the pages under ``static/``
(plain ES modules and CSS, no build step, no CDN) and ``/api/...``, which the pages call and
which scripts can call too. Everything it shows or changes goes through ``ferrymq.client``.
"""
