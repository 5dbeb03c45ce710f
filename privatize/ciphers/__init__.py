"""Ciphers: the whole-text polyalphabetic cipher (``vigenere``) and deterministic entity
tokens (``entity``: AES-SIV by default, ECB only to reproduce the SoE paper)."""
