# Writes OUT (a header defining FP8RUN_COMMIT_STR) with the commit the build is of: COMMIT when
# given (a tree copied without .git), else `git describe --always --dirty` of SRC, else
# "unknown". The file is rewritten only when the text changes, so a new commit recompiles the
# one source that includes it and nothing else.
if(NOT COMMIT)
  execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=7
                  OUTPUT_VARIABLE COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT COMMIT)
    set(COMMIT "unknown")
  endif()
endif()
string(REGEX REPLACE "[^A-Za-z0-9._-]" "" COMMIT "${COMMIT}")
set(text "#define FP8RUN_COMMIT_STR \"${COMMIT}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
