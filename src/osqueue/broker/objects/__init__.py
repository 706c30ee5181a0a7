"""Objects beside the document: payload and result objects and the sweeps that delete orphans."""
