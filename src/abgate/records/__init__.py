"""The record models: the typed sections of abgate's record documents, one model per
fact, below compare/ so that producers and readers of every layer above share them."""
