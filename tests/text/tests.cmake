# Tokenizer unit tests: UTF-8 helpers and the streamer, pre-tokenizer splits, tiny hand-built BPE and
# SentencePiece vocabularies, special tokens / EOG, errors, and loading from a GGUF written by the Writer.
# Chat templates: the request as variables, errors, threads, hostile templates (parity: test_jinja.py).
set(FERRY_TEST_SOURCES
  unicode_test.cc
  pretokenizer_test.cc
  tokenizer_test.cc
  chat_template_test.cc
)
set(FERRY_TEST_DEPS text format tensor base)
