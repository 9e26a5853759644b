"""The code under test: a signup form that accepts names and addresses in six languages."""

SUPPORTED_LOCALES = ["en_US", "de_DE", "fr_FR", "ja_JP", "pt_BR", "zh_CN"]


def normalise_email(address: str) -> str:
    local, _, domain = address.strip().partition("@")
    return f"{local}@{domain.lower()}"


def display_name(name: str) -> str:
    return " ".join(name.split())
