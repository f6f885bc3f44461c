"""The HTTP plumbing around the screening core (the app itself is ``service.app``): middleware (request
context, header timeout, security headers, CORS), RFC 9457 problems (``errors``), dependencies (``deps``) and
the response schemas (``schemas``). The routers are ``service.api``; nothing outside HTTP imports this package."""
