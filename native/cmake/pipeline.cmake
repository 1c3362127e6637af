# native/cmake/pipeline.cmake — adds the pipeline executor and its MPI comm layer
# (src/pipeline.c, src/comm_mpi.c, src/comm_host.c) to libgantry_native, and the generated site
# header directory (GANTRY_SITE_INCLUDE_DIR, written by `gantry build`) when given.
option(GANTRY_MPI "build the pipeline executor with the MPI comm layer" ON)
set(GANTRY_SITE_INCLUDE_DIR "" CACHE PATH "directory holding the generated gantry_site.h")

if(GANTRY_MPI)
  find_package(MPI REQUIRED COMPONENTS C)
  target_sources(gantry_native PRIVATE src/comm_host.c src/comm_mpi.c src/pipeline.c)
  target_link_libraries(gantry_native PRIVATE MPI::MPI_C)
endif()
if(GANTRY_SITE_INCLUDE_DIR)
  target_include_directories(gantry_native PRIVATE "${GANTRY_SITE_INCLUDE_DIR}")
  target_compile_definitions(gantry_native PRIVATE GANTRY_HAVE_SITE_H=1)
endif()
