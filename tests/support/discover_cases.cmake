# Writes the ctest entries for ft_tests, one per doctest case, after each build
# (cmake -P, from ft_add_doctest_cases in tests/CMakeLists.txt).
#
# Why not doctest_discover_tests: it reads the list of names as a CMake list,
# so a name holding a semicolon became two entries that each matched no case
# and passed. Here every name is read whole, and a case runs from a filter that
# matches its name exactly: doctest's filters split at commas unless escaped,
# and treat * and ? as wildcards (a ? stands in for the characters ctest
# cannot carry). The last entry, <target>.every_case_ran_once, runs after all
# the others and holds the record they leave to the list (tests/main.cpp).
#
# Inputs (-D): EXECUTABLE, CTEST_FILE, TARGET, WORKING_DIR, ENVIRONMENT (a list
# written with "|" between items), RECORD_DIR.

cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)

execute_process(COMMAND "${EXECUTABLE}" --list-test-cases --no-version
                OUTPUT_VARIABLE output RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --list-test-cases failed (${result}):\n${output}")
endif()

# Semicolons would split the lines below; carry them as a mark and put them back per name.
set(semicolon "<ft-semicolon>")
string(REPLACE ";" "${semicolon}" output "${output}")
string(REPLACE "\n" ";" lines "${output}")
string(REPLACE "|" ";" environment "${ENVIRONMENT}")
list(APPEND environment "FT_TEST_RECORD=${RECORD_DIR}")

set(script "")
set(names "")
set(bracket "]==]")
foreach(line IN LISTS lines)
  if(line STREQUAL "" OR line MATCHES "^=+$" OR line MATCHES "^\\[doctest\\] ")
    continue()
  endif()
  string(REPLACE "${semicolon}" ";" case "${line}")
  string(FIND "${case}" "${bracket}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "doctest case name holds \"${bracket}\", which ctest's script cannot carry: ${case}")
  endif()
  # The filter: \ and , escaped for doctest, wildcards and ; as ? (any one character).
  string(REPLACE "\\" "\\\\" filter "${case}")
  string(REPLACE "," "\\," filter "${filter}")
  string(REGEX REPLACE "[*?;]" "?" filter "${filter}")
  # The ctest name: ; is a list separator in every property that names tests.
  string(REPLACE ";" "," name "${case}")
  if("${name}" IN_LIST names)
    message(FATAL_ERROR "two doctest cases read the same to ctest: ${name}")
  endif()
  list(APPEND names "${name}")
  string(APPEND script
    "add_test([==[${name}]==] [==[${EXECUTABLE}]==] [==[--test-case=${filter}]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIR}]==]"
    " ENVIRONMENT [==[${environment}]==] SKIP_RETURN_CODE 77 FIXTURES_REQUIRED ${TARGET}.record)\n")
endforeach()

list(LENGTH names count)
if(count EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} lists no test case:\n${output}")
endif()

# The record starts empty before the first case and is checked after the last.
string(APPEND script
  "add_test(${TARGET}.record_reset [==[${CMAKE_COMMAND}]==] -E rm -rf [==[${RECORD_DIR}]==])\n"
  "set_tests_properties(${TARGET}.record_reset PROPERTIES FIXTURES_SETUP ${TARGET}.record)\n"
  "add_test(${TARGET}.every_case_ran_once [==[${EXECUTABLE}]==] [==[--verify-record=${RECORD_DIR}]==])\n"
  "set_tests_properties(${TARGET}.every_case_ran_once PROPERTIES FIXTURES_REQUIRED ${TARGET}.record"
  " DEPENDS [==[${names}]==])\n")
file(WRITE "${CTEST_FILE}" "${script}")
