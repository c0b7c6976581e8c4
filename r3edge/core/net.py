"""Network addresses: which ones stay on this machine (the server's bind rule and the client's token rule)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address, bracketed IPv6 allowed, or ``localhost``) is a loopback address.
    Any other hostname counts as beyond loopback: it may resolve anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
