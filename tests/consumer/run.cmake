# Installs the build tree into a scratch prefix, then configures, builds and runs the consumer
# project against it: what `find_package(halfgrad)` in a user's project does.
file(REMOVE_RECURSE ${HG_WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${HG_BUILD_DIR} --prefix ${HG_WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${HG_SRC} -B ${HG_WORK}/build -DCMAKE_PREFIX_PATH=${HG_WORK}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${HG_WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${HG_WORK}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out ECHO_OUTPUT_VARIABLE)
if(rc)
  message(FATAL_ERROR "the consumer program failed: ${rc}")
endif()
# With CUDA, libhalfgrad must find the installed backend next to it: "no device" is fine, a load failure not.
if(HG_WITH_CUDA AND out MATCHES "cuda: [^\n]*(could not be loaded|built without)")
  message(FATAL_ERROR "the installed package did not load its CUDA backend: ${CMAKE_MATCH_0}")
endif()
