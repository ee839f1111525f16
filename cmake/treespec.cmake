# Shared build settings and the helper that declares one static library per module.

set(TREESPEC_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(TREESPEC_WERROR)
  list(APPEND TREESPEC_WARNINGS -Werror)
endif()

set(TREESPEC_COMMON_FLAGS)
if(TREESPEC_NATIVE)
  list(APPEND TREESPEC_COMMON_FLAGS -march=native)
endif()
if(TREESPEC_SANITIZE)
  foreach(san IN LISTS TREESPEC_SANITIZE)
    list(APPEND TREESPEC_COMMON_FLAGS -fsanitize=${san})
  endforeach()
  # -g1: line tables, enough for file:line in sanitizer reports, at a fraction of -g's
  # compile time (docs/reliability.md, "CI time").
  list(APPEND TREESPEC_COMMON_FLAGS -fno-omit-frame-pointer -g1)
  add_link_options(${TREESPEC_COMMON_FLAGS})
endif()
if(TREESPEC_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TREESPEC_FUZZ needs clang (libFuzzer): CXX=clang++-14")
  endif()
  list(APPEND TREESPEC_COMMON_FLAGS -fsanitize=fuzzer-no-link)
endif()
if(TREESPEC_SANITIZE MATCHES "undefined")
  list(APPEND TREESPEC_COMMON_FLAGS -fno-sanitize-recover=undefined)
endif()
add_compile_options(${TREESPEC_COMMON_FLAGS})

# treespec_layer(<target> <name>): the include path of module <name> (docs/architecture.md,
# "Layering"). src/ is no include directory of any target: each module gets its own
# directory ${PROJECT_BINARY_DIR}/layers/<name>/ holding one symbolic link, <name> ->
# src/<name>, and that directory (with include/, the C API's public headers) is its PUBLIC
# include directory. Module dependencies are PUBLIC too, so a target sees "<m>/x.h" exactly
# for its own module and those it depends on, directly or not; including a header of any
# other module fails to compile ("No such file or directory"). The prefix map, PUBLIC as
# well, spells __FILE__ (and debug-info paths) of a header reached through the link as its
# path under src/, as before.
function(treespec_layer target name)
  set(dir ${PROJECT_BINARY_DIR}/layers/${name})
  file(MAKE_DIRECTORY ${dir})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${name} ${dir}/${name} SYMBOLIC)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/include ${dir})
  target_compile_options(${target} PUBLIC -ffile-prefix-map=${dir}/${name}/=${PROJECT_SOURCE_DIR}/src/${name}/)
endfunction()

# treespec_add_module(<name> [DEPS <targets>...] [SOURCES <extra>...])
# Builds src/<name>/**/*.cpp into the static library treespec_<name>. DEPS are the
# modules (and external libraries) it may use: their headers are the only other ones
# it can include (treespec_layer).
function(treespec_add_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;SOURCES" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cpp)
  list(APPEND srcs ${ARG_SOURCES})
  if(NOT srcs)
    # A module that has no code yet still exists as a target, so dependents link.
    set(srcs ${PROJECT_BINARY_DIR}/empty_module_${name}.cpp)
    file(WRITE ${srcs} "// module ${name} has no sources yet\n")
  endif()
  add_library(treespec_${name} STATIC ${srcs})
  treespec_layer(treespec_${name} ${name})
  target_compile_options(treespec_${name} PRIVATE ${TREESPEC_WARNINGS})
  target_link_libraries(treespec_${name} PUBLIC ${ARG_DEPS})
  treespec_unity(treespec_${name})
endfunction()

# treespec_unity(<target>...): with TREESPEC_UNITY (default ON) a module's files are
# compiled as a few unity TUs (CMake's UNITY_BUILD, up to 8 files each), so the heavy
# headers (fmt, nlohmann/json, CLI11, cpp-httplib, the standard library) are parsed once
# per batch instead of once per file: a third less compile time for the libraries. Names
# at namespace scope (anonymous namespaces included) must therefore be unique across a
# module's files. The kernels stay one TU per file (their ISA flags are per file). The
# test binaries use it too (tests/CMakeLists.txt: 43% less build time for the tests).
function(treespec_unity)
  if(TREESPEC_UNITY)
    set_target_properties(${ARGN} PROPERTIES UNITY_BUILD ON)
  endif()
endfunction()

# treespec_light(<target>...): code that is expensive to compile and cheap to run (the
# tests, the tool, option tables, the C API, the server's HTTP layer, the bench's
# reports, the chat-template interpreter, the GGUF and tokenizer front ends) is compiled
# at -O1 in Release builds (40% less compile time than -O3 for GoogleTest's macros, 20-30%
# for nlohmann/json, CLI11 and cpp-httplib; the run time is spent in the kernels, the
# model, the engine and the drafters, which keep -O3) and at -O0 in sanitizer builds
# (ASan + UBSan at -O1 cost about twice -O0's compile time there; those modules keep -O1,
# the kernels -O2). docs/reliability.md, "CI time".
function(treespec_light)
  foreach(t IN LISTS ARGN)
    if(TREESPEC_SANITIZE)
      target_compile_options(${t} PRIVATE -O0)
    elseif(CMAKE_BUILD_TYPE STREQUAL "Release")
      target_compile_options(${t} PRIVATE -O1)
    endif()
  endforeach()
endfunction()
