-- A database outside the grant: the restricted user must be refused (a runtime error).
CREATE DATABASE kece_canary_escape;
