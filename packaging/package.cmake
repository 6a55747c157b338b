# The Debian package (issue 15 item 6): `cpack -G DEB` in a build directory writes
# softverbs_<version>_<arch>.deb. It installs the drop-in libraries into a private directory
# (<libdir>/softverbs, never over rdma-core's own files: programs reach them only through
# `softverbs run`), the CLI into /usr/bin and the documentation into /usr/share/doc/softverbs.
# docs/install.md shows how to build and use it.

# README.md links docs/*.md relatively: the same layout keeps the links working.
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB SOFTVERBS_DOCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${SOFTVERBS_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME softverbs)
set(CPACK_PACKAGE_VENDOR softverbs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "RDMA verbs in software: a device softverbs0 for unmodified RDMA programs")
set(CPACK_PACKAGE_DESCRIPTION
    "softverbs provides drop-in replacements of rdma-core's libibverbs, librdmacm, libmlx5 and\n\
libefa, so that unmodified RDMA programs see a device softverbs0 without an RDMA NIC, kernel\n\
module or root. The libraries live in a private directory and never replace the system's\n\
rdma-core: programs use them through `softverbs run -- PROGRAM`.")
set(SOFTVERBS_PACKAGE_CONTACT "softverbs developers <softverbs@localhost>" CACHE STRING
    "The Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${SOFTVERBS_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The programs softverbs is for; none is needed to install or run it.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "ibverbs-utils, rdmacm-utils, perftest")
# Run-time dependencies come from the binaries (dpkg-shlibdeps, in dpkg-dev): the CLI and the
# libraries need libc6, libstdc++6 and libgcc-s1, with the versions of the symbols they use, and
# libssl3 (libcrypto: AES-GCM of ESP flow actions, docs/raw-packet.md).
# librdmacm, libmlx5 and libefa need libibverbs.so.1: ours, in the private directory, which
# which dpkg-shlibdeps must be told of (it looks for a private directory inside the package
# being built first) -- else it finds the system's and makes the package depend on rdma-core's
# libibverbs1 (tests/package/package_test.sh checks the Depends).
find_program(SOFTVERBS_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(SOFTVERBS_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "/usr/${SOFTVERBS_INSTALL_LIBDIR}")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libstdc++6, libgcc-s1, libssl3")
endif()
include(CPack)
