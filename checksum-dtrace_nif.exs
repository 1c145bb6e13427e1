%{
  "libdtrace_lttng_tp-v0.1.0-nif-2.15-aarch64-unknown-linux-gnu.so.tar.gz" => "sha256:4b7a4fc4359d2df0cec5c051fddecd9a2b519659104b1ab598d61ea79934e2e5",
  "libdtrace_lttng_tp-v0.1.0-nif-2.15-x86_64-unknown-linux-gnu.so.tar.gz" => "sha256:55fb963cd576f21aac73c32c53b6865b1f0c1da78650c7c7003b2a0bfa5f3dff",
  "libdtrace_nif-v0.1.0-nif-2.15-aarch64-unknown-linux-gnu.so.tar.gz" => "sha256:0decbaf19a37d44a522a3ad64fa92dbfcd82ba6eb8d2d020b09ed6cd328e6f77",
  "libdtrace_nif-v0.1.0-nif-2.15-x86_64-unknown-linux-gnu.so.tar.gz" => "sha256:5080793f93a09bce030a5a0f5e11af4972091730d7af5e285a16728a80f877b6",
  "libtracer_nif-v0.1.0-nif-2.15-aarch64-unknown-linux-gnu.so.tar.gz" => "sha256:6ef61c719f16e777b395d4dd68a25f8c65cf52c790f5c2c99fc0f3f20923756b",
  "libtracer_nif-v0.1.0-nif-2.15-x86_64-unknown-linux-gnu.so.tar.gz" => "sha256:25787b686eeb278178118f46876dc7f3e4efbf7b6486de352f7ebf0754e0d08d",
}
